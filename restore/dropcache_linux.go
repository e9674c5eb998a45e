package restore

import (
	"os"

	"golang.org/x/sys/unix"
)

// dropCache asks the kernel to drop the clean cached pages of the file at
// path (POSIX_FADV_DONTNEED): see writeInPlace. Best effort.
func dropCache(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}
