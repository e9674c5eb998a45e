//go:build !unix

package kit

import "io/fs"

// owner is 0, 0 where files have no Unix owner.
func owner(fs.FileInfo) (uid, gid int) { return 0, 0 }

// canChown is false where files have no Unix owner.
func canChown() bool { return false }
