//go:build unix

package kit_test

import (
	"io/fs"
	"syscall"
)

func ownerOf(fi fs.FileInfo) (int, int) {
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid)
}
