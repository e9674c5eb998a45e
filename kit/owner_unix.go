//go:build unix

package kit

import (
	"io/fs"
	"os"
	"syscall"
)

// owner returns the uid and gid of fi.
func owner(fi fs.FileInfo) (uid, gid int) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid), int(st.Gid)
	}
	return 0, 0
}

// canChown reports whether this process may give files away (root).
func canChown() bool { return os.Geteuid() == 0 }
