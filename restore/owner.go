package restore

import (
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
)

// Owner is who a restored member's files belong to (RestoreOptions.Owner):
// etcd's user, when the restore runs as root.
type Owner struct {
	// UID is the user id; GID the group id, -1 to leave the group as it is.
	UID, GID int
}

// ParseOwner reads USER[:GROUP], as chown does: a user name or numeric id,
// then optionally a group name or numeric id. Without a group, a known
// user's primary group is used (etcd:etcd for "etcd"); a numeric user id
// that names no user keeps the group. An unknown name is an error.
func ParseOwner(s string) (Owner, error) {
	u, g, hasGroup := strings.Cut(s, ":")
	if u == "" || (hasGroup && (g == "" || strings.Contains(g, ":"))) {
		return Owner{}, fmt.Errorf("owner %q: use USER or USER:GROUP (names or numeric ids)", s)
	}
	o := Owner{UID: -1, GID: -1}
	if n, ok := numericID(u); ok {
		o.UID = n
		if acct, err := user.LookupId(u); err == nil && !hasGroup {
			o.GID, _ = strconv.Atoi(acct.Gid)
		}
	} else {
		acct, err := user.Lookup(u)
		if err != nil {
			return Owner{}, fmt.Errorf("owner %q: unknown user %q (create it, or give a numeric uid): %w", s, u, err)
		}
		o.UID, err = strconv.Atoi(acct.Uid)
		if err != nil {
			return Owner{}, fmt.Errorf("owner %q: user %q has the non-numeric uid %q", s, u, acct.Uid)
		}
		if !hasGroup {
			o.GID, _ = strconv.Atoi(acct.Gid)
		}
	}
	if hasGroup {
		if n, ok := numericID(g); ok {
			o.GID = n
		} else {
			grp, err := user.LookupGroup(g)
			if err != nil {
				return Owner{}, fmt.Errorf("owner %q: unknown group %q (create it, or give a numeric gid): %w", s, g, err)
			}
			if o.GID, err = strconv.Atoi(grp.Gid); err != nil {
				return Owner{}, fmt.Errorf("owner %q: group %q has the non-numeric gid %q", s, g, grp.Gid)
			}
		}
	}
	if o.UID < 0 || o.GID < -1 {
		return Owner{}, fmt.Errorf("owner %q: ids must not be negative", s)
	}
	return o, nil
}

// numericID reads a uid or gid written as digits.
func numericID(s string) (int, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 31)
	if err != nil {
		return -2, true // out of range: refused by the caller
	}
	return int(n), true
}

// chownTree gives dir and everything below it to o (symlinks themselves,
// never their targets).
func chownTree(dir string, o Owner) error {
	return filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := os.Lchown(p, o.UID, o.GID); err != nil {
			return fmt.Errorf("chown %s to %d:%d: %w", p, o.UID, o.GID, err)
		}
		return nil
	})
}

// DataDirInUse reports whether the database under dataDir
// (member/snap/db) is held by a running etcd (its bbolt lock is taken), and
// names the holders it can see in /proc. A missing database is not in use.
// On platforms without flock it cannot tell and answers false.
func DataDirInUse(dataDir string) (inUse bool, who string, err error) {
	return dbInUse(dataDir)
}
