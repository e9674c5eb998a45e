//go:build linux || darwin

package restore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dbInUse reports whether the bbolt database under dataDir
// (member/snap/db) is locked, as a running etcd holds it: bbolt takes an
// exclusive flock when it opens the file for writing, so a non-blocking
// one of ours fails while that etcd lives. who names the holders found in
// /proc (empty when none can be named). A missing database is not in use.
func dbInUse(dataDir string) (inUse bool, who string, err error) {
	db := filepath.Join(dataDir, "member", "snap", "db")
	f, err := os.Open(db)
	if errors.Is(err, os.ErrNotExist) {
		return false, "", nil
	}
	if err != nil {
		return false, "", fmt.Errorf("check %s: %w", db, err)
	}
	defer f.Close()
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case err == nil:
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false, "", nil
	case errors.Is(err, unix.EWOULDBLOCK):
		return true, holders(db), nil
	default:
		return false, "", fmt.Errorf("lock %s: %w", db, err)
	}
}

// holders names the processes that have file open ("pid 123 (etcd)"),
// from /proc/*/fd; "" when there is no /proc or none is visible.
func holders(file string) string {
	abs, err := filepath.Abs(file)
	if err != nil {
		return ""
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil {
		abs = r
	}
	want, err := os.Stat(abs)
	if err != nil {
		return ""
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return ""
	}
	self := strconv.Itoa(os.Getpid())
	var out []string
	for _, p := range procs {
		pid := p.Name()
		if _, err := strconv.Atoi(pid); err != nil || pid == self {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", pid, "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link := filepath.Join("/proc", pid, "fd", fd.Name())
			target, err := os.Readlink(link)
			if err != nil || target != abs {
				// In a container (a kubeadm static pod) the path is the
				// container's: compare the file itself, only for an etcd
				// database, never stat'ing every file of every process.
				if err != nil || !strings.HasSuffix(target, "/member/snap/db") {
					continue
				}
				if fi, err := os.Stat(link); err != nil || !os.SameFile(fi, want) {
					continue
				}
			}
			name := "?"
			if comm, err := os.ReadFile(filepath.Join("/proc", pid, "comm")); err == nil {
				name = strings.TrimSpace(string(comm))
			}
			out = append(out, "pid "+pid+" ("+name+")")
			break
		}
	}
	return strings.Join(out, ", ")
}
