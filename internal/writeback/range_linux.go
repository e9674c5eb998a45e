package writeback

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// startWriteback starts asynchronous writeback of [off, off+n). ok is false
// when the file system or kernel does not support sync_file_range.
func startWriteback(f *os.File, off, n int64) (ok bool, err error) {
	return syncRange(f, off, n, unix.SYNC_FILE_RANGE_WRITE)
}

// waitWriteback writes out [off, off+n) and waits until it is on disk (as far
// as sync_file_range goes: no metadata, no device cache flush; the final
// fsync does that).
func waitWriteback(f *os.File, off, n int64) (ok bool, err error) {
	return syncRange(f, off, n, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER)
}

func syncRange(f *os.File, off, n int64, flags int) (bool, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return false, nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = unix.SyncFileRange(int(fd), off, n, flags)
			if !errors.Is(serr, unix.EINTR) {
				return
			}
		}
	}); err != nil {
		return false, nil
	}
	switch {
	case serr == nil:
		return true, nil
	case errors.Is(serr, unix.ENOSYS), errors.Is(serr, unix.EINVAL),
		errors.Is(serr, unix.EOPNOTSUPP), errors.Is(serr, unix.ESPIPE):
		return false, nil
	default:
		return false, os.NewSyscallError("sync_file_range", serr)
	}
}
