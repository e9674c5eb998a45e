package kit

import (
	"io/fs"
	"os"
	"path/filepath"
)

// tree is where Restore writes: the file operations of an os.Root, on
// names relative to the target directory.
type tree interface {
	Lstat(name string) (fs.FileInfo, error)
	Stat(name string) (fs.FileInfo, error)
	Mkdir(name string, perm fs.FileMode) error
	MkdirAll(name string, perm fs.FileMode) error
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
	Open(name string) (*os.File, error)
	Chmod(name string, mode fs.FileMode) error
	Lchown(name string, uid, gid int) error
	Symlink(oldname, newname string) error
	Rename(oldname, newname string) error
	Remove(name string) error
	Close() error
}

// openTree returns an os.Root of dir, except for the file system's root,
// where nothing can escape and the plain paths are used: an os.Root
// refuses to follow any absolute symlink, and the directories kits go
// into may be reached through one (/var/lib/rancher -> /data/rancher).
func openTree(dir string) (tree, error) {
	if abs, err := filepath.Abs(dir); err == nil && abs == string(filepath.Separator) {
		return hostTree{}, nil
	}
	return os.OpenRoot(dir)
}

// hostTree is the file system's root by plain paths.
type hostTree struct{}

func (hostTree) path(name string) string { return filepath.Join(string(filepath.Separator), name) }

func (h hostTree) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(h.path(name)) }
func (h hostTree) Stat(name string) (fs.FileInfo, error)  { return os.Stat(h.path(name)) }
func (h hostTree) Mkdir(name string, perm fs.FileMode) error {
	return os.Mkdir(h.path(name), perm)
}
func (h hostTree) MkdirAll(name string, perm fs.FileMode) error {
	return os.MkdirAll(h.path(name), perm)
}
func (h hostTree) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(h.path(name), flag, perm)
}
func (h hostTree) Open(name string) (*os.File, error)        { return os.Open(h.path(name)) }
func (h hostTree) Chmod(name string, mode fs.FileMode) error { return os.Chmod(h.path(name), mode) }
func (h hostTree) Lchown(name string, uid, gid int) error {
	return os.Lchown(h.path(name), uid, gid)
}
func (h hostTree) Symlink(oldname, newname string) error {
	return os.Symlink(oldname, h.path(newname))
}
func (h hostTree) Rename(oldname, newname string) error {
	return os.Rename(h.path(oldname), h.path(newname))
}
func (h hostTree) Remove(name string) error { return os.Remove(h.path(name)) }
func (hostTree) Close() error               { return nil }
