package snapshot

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// createAnonymous creates a file in dir that has no name: O_TMPFILE, or,
// where the file system does not support it, a file unlinked right after
// it was created.
func createAnonymous(dir string) (*os.File, error) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "(unlinked spool file)")), nil
	}
	// EOPNOTSUPP: the file system has no O_TMPFILE; EISDIR: the kernel does
	// not know the flag (it reads as O_DIRECTORY).
	if !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EINVAL) {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	return createUnlinked(dir)
}

// SpoolPath returns a path by which this process opens the file f again,
// also when f has no name (CreateSpool): a new open file description of
// the same inode, for readers that take a path.
func SpoolPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.FormatUint(uint64(f.Fd()), 10)
}
