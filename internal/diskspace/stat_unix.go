//go:build linux || darwin

package diskspace

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// stat is dir's file system (its device) and the bytes available to
// this user there.
func stat(dir string) (fs uint64, free uint64, known bool, err error) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, false, fmt.Errorf("free space of %s: %w", dir, err)
	}
	var s unix.Stat_t
	if err := unix.Stat(dir, &s); err != nil {
		return 0, 0, false, fmt.Errorf("free space of %s: %w", dir, err)
	}
	return uint64(s.Dev), uint64(st.Bavail) * uint64(st.Bsize), true, nil
}
