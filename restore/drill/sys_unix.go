//go:build linux || darwin

package drill

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// freeBytes returns the bytes available to this user in dir's file system.
func freeBytes(dir string) (uint64, bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return uint64(st.Bavail) * uint64(st.Bsize), true, nil
}

// processGone reports whether no process with this pid exists.
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}
