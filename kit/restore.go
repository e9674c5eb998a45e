package kit

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// ErrExists is wrapped when Restore finds something where a kit entry
// goes and is not told to move it aside.
var ErrExists = errors.New("already exists")

// RestoreOptions say how Restore lays a kit out.
type RestoreOptions struct {
	// Force moves what is in the way aside to <path>.lifeboat-old-<time>
	// (never deletes) instead of refusing.
	Force bool
	// DryRun plans only: nothing is written.
	DryRun bool
	// Now names moved-aside files.
	Now time.Time
}

// Restore actions.
const (
	ActionCreate  = "create"  // nothing there: written
	ActionKeep    = "keep"    // a directory already there: kept as it is, entries go into it
	ActionReplace = "replace" // something in the way: moved aside (Force), then written
	ActionRefuse  = "refuse"  // something in the way, no Force: nothing is written at all
)

// Planned is one entry of a restore and what happens to it.
type Planned struct {
	Entry
	// Target is where it goes (the directory joined with Path).
	Target string
	Action string
	// Aside is where what was in the way went (ActionReplace).
	Aside string `json:",omitempty"`
	// Parent is true for a directory the kit does not hold, on the way to
	// its entries, where something else is (a file, a symlink to one): it
	// is refused or moved aside like an entry in the way, and created
	// 0700 for the current user.
	Parent bool `json:",omitempty"`
}

// RestoreResult is what Restore did (or, with DryRun, would do).
type RestoreResult struct {
	Planned []Planned
	// Owners is true when files were given the kit's owners (running
	// as root); otherwise they belong to the user that restored them.
	Owners bool
}

// Restore writes the kit's entries below dir (created 0700 when missing),
// each at dir joined with its original path: "/" puts them back in place.
// Files are created 0600 and then given the kit's permission bits (setuid
// and setgid dropped); directories the kit does not hold are created 0700,
// those it holds get their mode once filled. Owners are set when running
// as root. Every operation goes through an os.Root of dir, so nothing is
// written outside it whatever the kit holds (for dir "/", where nothing is
// outside, through the plain paths: an os.Root refuses every absolute
// symlink on the way, and hosts have them, /var/run -> /run). Something already at an
// entry's place (other than a directory where the kit has a directory),
// or anything but a directory (or a symlink to one) where a directory on
// the way to an entry goes, makes Restore refuse before writing anything,
// unless Force, which moves it aside. Files are written to a temporary
// name, synced and renamed.
func Restore(dir string, k *Kit, opts RestoreOptions) (*RestoreResult, error) {
	if err := k.validate(); err != nil {
		return nil, err
	}
	res := &RestoreResult{Owners: canChown()}
	root, err := openTarget(dir, opts.DryRun)
	if err != nil {
		return nil, fmt.Errorf("kit restore: %w", err)
	}
	if root != nil {
		defer root.Close()
	}
	refused, err := res.plan(root, dir, k, opts.Force)
	if err != nil {
		return nil, err
	}
	if len(refused) > 0 && !opts.Force {
		return res, fmt.Errorf("kit restore: %s %w: nothing was written (use --force to move aside what is there)", summarize(refused), ErrExists)
	}
	if opts.DryRun {
		return res, nil
	}
	stamp := opts.Now.UTC().Format("20060102T150405Z")
	for i := range res.Planned {
		if err := restoreEntry(root, dir, &res.Planned[i], stamp, res.Owners); err != nil {
			return res, fmt.Errorf("kit restore: %s: %w", res.Planned[i].Target, err)
		}
	}
	if err := res.finishDirs(root); err != nil {
		return res, err
	}
	if err := syncDirs(root, res.Planned); err != nil {
		return res, fmt.Errorf("kit restore: %w", err)
	}
	return res, nil
}

// openTarget opens the directory a kit is restored into, creating it
// (0700) unless this is a dry run; a dry run of a directory that does not
// exist returns a nil tree (everything in it would be created).
func openTarget(dir string, dryRun bool) (tree, error) {
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !dryRun {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(dir); err != nil && dryRun {
		return nil, nil
	}
	return openTree(dir)
}

// plan fills res.Planned with what restoring k into dir does to each of
// its entries (and to a directory of the way that is not one), and
// returns the targets that are in the way (refused unless force).
func (res *RestoreResult) plan(root tree, dir string, k *Kit, force bool) (refused []string, err error) {
	inKit := map[string]bool{}
	for _, e := range k.Entries {
		inKit[e.Path] = true
	}
	checked := map[string]bool{}
	for _, e := range k.Entries {
		if root != nil {
			parent, err := parentInTheWay(root, e.Path, inKit, checked)
			if err != nil {
				return nil, fmt.Errorf("kit restore: %s: %w", filepath.Join(dir, filepath.FromSlash(e.Path)), err)
			}
			if parent != "" {
				p := Planned{Entry: Entry{Path: parent, Type: TypeDir, Mode: 0o700, UID: os.Geteuid(), GID: os.Getegid()},
					Target: filepath.Join(dir, filepath.FromSlash(parent)), Action: ActionRefuse, Parent: true}
				if force {
					p.Action = ActionReplace
				}
				refused = append(refused, p.Target+" (not a directory, and the kit has entries below it)")
				res.Planned = append(res.Planned, p)
			}
		}
		p, err := planEntry(root, dir, e, force)
		if err != nil {
			return nil, err
		}
		if p.Action == ActionRefuse || p.Action == ActionReplace {
			refused = append(refused, p.Target)
		}
		res.Planned = append(res.Planned, p)
	}
	return refused, nil
}

// planEntry plans one kit entry against what is at its target now.
func planEntry(root tree, dir string, e Entry, force bool) (Planned, error) {
	p := Planned{Entry: e, Target: filepath.Join(dir, filepath.FromSlash(e.Path)), Action: ActionCreate}
	if root == nil {
		return p, nil
	}
	fi, err := root.Lstat(rel(e.Path))
	switch {
	case err == nil && fi.IsDir() && e.Type == TypeDir:
		p.Action = ActionKeep
	case err == nil:
		p.Action = ActionRefuse
		if force {
			p.Action = ActionReplace
		}
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrInvalid) || isNotDir(err):
		// nothing there (or under something moved aside)
	default:
		return p, fmt.Errorf("kit restore: %s: %w", p.Target, err)
	}
	return p, nil
}

// finishDirs sets the restored directories' modes and owners last (a 0500
// directory could not be filled), deepest first.
func (res *RestoreResult) finishDirs(root tree) error {
	for i := len(res.Planned) - 1; i >= 0; i-- {
		p := res.Planned[i]
		if p.Type != TypeDir || p.Action == ActionKeep || p.Parent {
			continue
		}
		if err := root.Chmod(rel(p.Path), p.Mode&fs.ModePerm|p.Mode&fs.ModeSticky|p.Mode&fs.ModeSetgid); err != nil {
			return fmt.Errorf("kit restore: %s: %w", p.Target, err)
		}
		if res.Owners {
			if err := root.Lchown(rel(p.Path), p.UID, p.GID); err != nil {
				return fmt.Errorf("kit restore: %s: %w", p.Target, err)
			}
		}
	}
	return nil
}

func rel(p string) string { return strings.TrimPrefix(p, "/") }

// parentInTheWay returns the first directory on the way to the kit path
// p that the kit does not hold (those it holds are planned as entries)
// and where something other than a directory, or a symlink to one, is;
// "" when there is none. checked holds the directories already seen, so
// each is reported once; below one in the way nothing exists.
func parentInTheWay(root tree, p string, inKit, checked map[string]bool) (string, error) {
	var dirs []string
	for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
		dirs = append(dirs, d)
	}
	for _, d := range slices.Backward(dirs) {
		if checked[d] {
			continue
		}
		checked[d] = true
		if inKit[d] {
			continue
		}
		fi, err := root.Stat(rel(d))
		switch {
		case err == nil && fi.IsDir():
			continue
		case errors.Is(err, fs.ErrNotExist) || isNotDir(err):
			if _, lerr := root.Lstat(rel(d)); lerr != nil {
				return "", nil // nothing there: created on the way
			}
			return d, nil // a symlink to nothing
		case err == nil:
			return d, nil
		default:
			return "", err
		}
	}
	return "", nil
}

func isNotDir(err error) bool { return errors.Is(err, syscall.ENOTDIR) }

func summarize(paths []string) string {
	if len(paths) <= 3 {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:3], ", "), len(paths)-3)
}

func restoreEntry(root tree, dir string, p *Planned, stamp string, owners bool) error {
	name := rel(p.Path)
	if p.Action == ActionReplace {
		aside, err := moveAside(root, name, stamp)
		if err != nil {
			return err
		}
		p.Aside = filepath.Join(dir, filepath.FromSlash(aside))
	}
	if parent := path.Dir(name); parent != "." {
		if err := root.MkdirAll(parent, 0o700); err != nil {
			return err
		}
	}
	switch p.Type {
	case TypeDir:
		if p.Action == ActionKeep {
			return nil
		}
		return root.Mkdir(name, 0o700)
	case TypeSymlink:
		if err := root.Symlink(p.Link, name); err != nil {
			return err
		}
		if owners {
			return root.Lchown(name, p.UID, p.GID)
		}
		return nil
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	tmp := path.Join(path.Dir(name), "."+path.Base(name)+".lifeboat-tmp-"+hex.EncodeToString(suffix[:]))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(p.Data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, p.Mode&fs.ModePerm)
	}
	if err == nil && owners {
		err = root.Lchown(tmp, p.UID, p.GID)
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
	}
	return err
}

// moveAside renames name to <name>.lifeboat-old-<stamp> (with a counter
// when taken), as restore does with data dirs; it returns the new name.
func moveAside(root tree, name, stamp string) (string, error) {
	base := name + ".lifeboat-old-" + stamp
	for i := range 100 {
		aside := base
		if i > 0 {
			aside = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := root.Lstat(aside); err == nil {
			continue
		}
		if err := root.Rename(name, aside); err != nil {
			return "", fmt.Errorf("move aside: %w", err)
		}
		return aside, nil
	}
	return "", errors.New("move aside: too many earlier copies beside it")
}

// syncDirs fsyncs every directory an entry was written into.
func syncDirs(root tree, planned []Planned) error {
	var dirs []string
	for _, p := range planned {
		if p.Action != ActionKeep {
			dirs = append(dirs, path.Dir(rel(p.Path)))
		}
	}
	slices.Sort(dirs)
	for _, d := range slices.Compact(dirs) {
		f, err := root.Open(d)
		if err != nil {
			return err
		}
		err = f.Sync()
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", d, err)
		}
	}
	return nil
}
