package diskspace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/lifeboat-dev/lifeboat/internal/units"
)

// ErrNoSpace is wrapped when a file system lacks the room a job needs.
var ErrNoSpace = errors.New("not enough free space")

// Need is room a job needs in Dir (which may not exist yet: its nearest
// existing parent's file system counts), for What.
type Need struct {
	Dir   string
	Bytes int64
	What  string
}

// Check sums the needs by file system and refuses the first file system
// whose free space (for this user) is below its sum, naming its
// directories, what they are for, and the free space. A platform that
// cannot tell the free space passes.
func Check(needs []Need) error {
	type fsNeed struct {
		dirs  []string
		whats []string
		bytes int64
		free  uint64
	}
	var order []uint64
	byFS := map[uint64]*fsNeed{}
	for _, n := range needs {
		if n.Bytes <= 0 {
			continue
		}
		dir, err := existing(n.Dir)
		if err != nil {
			return err
		}
		fs, free, known, err := stat(dir)
		if err != nil {
			return err
		}
		if !known {
			continue
		}
		f := byFS[fs]
		if f == nil {
			f = &fsNeed{free: free}
			byFS[fs] = f
			order = append(order, fs)
		}
		f.dirs = append(f.dirs, n.Dir)
		f.whats = append(f.whats, fmt.Sprintf("%s %s", units.Bytes(n.Bytes), n.What))
		f.bytes += n.Bytes
	}
	for _, fs := range order {
		f := byFS[fs]
		if uint64(f.bytes) > f.free {
			return fmt.Errorf("%w for %s: needs %s (%s), its file system has %s free: free space there or give another directory",
				ErrNoSpace, strings.Join(f.dirs, ", "), units.Bytes(f.bytes), strings.Join(f.whats, ", "), units.Bytes(int64(f.free)))
		}
	}
	return nil
}

// Free is the bytes available to this user in dir's file system (known
// false where the platform cannot tell).
func Free(dir string) (free uint64, known bool, err error) {
	_, free, known, err = stat(dir)
	return free, known, err
}

// existing is dir or its nearest existing parent.
func existing(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(d); err == nil {
			return d, nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("free space of %s: %w", dir, err)
		}
		parent := filepath.Dir(d)
		if parent == d {
			return d, nil
		}
		d = parent
	}
}

// SameFileSystem reports whether dirs a and b (each, when not made yet,
// its nearest existing parent) are on one file system: a rename between
// them moves no data. False when it cannot tell.
func SameFileSystem(a, b string) bool {
	var devs [2]uint64
	for i, dir := range []string{a, b} {
		d, err := existing(dir)
		if err != nil {
			return false
		}
		fs, _, known, err := stat(d)
		if err != nil || !known {
			return false
		}
		devs[i] = fs
	}
	return devs[0] == devs[1]
}
