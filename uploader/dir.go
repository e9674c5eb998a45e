package uploader

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
)

// Dir is a Store in a local directory. Objects are regular files (0600)
// under root, in directories (0700) following the key's slashes. Put writes
// to a hidden temporary file, fsyncs it, hard-links it to the key's name
// (link(2) fails when the name exists, so an object is never replaced and of
// two writers exactly one wins), removes the temporary name and fsyncs the
// directory (writeback.WriteFileAtomic with NoReplace): a crash leaves no
// object or the whole new one. The directory must be on a file system with
// hard links (every local Linux one, NFS).
type Dir struct {
	root string
}

// tempPrefix marks Put's temporary files; List skips them.
const tempPrefix = ".tmp-"

// NewDir opens (creating it 0700 when missing) the directory store at root.
func NewDir(root string) (*Dir, error) {
	return openDir(root, true)
}

// ErrNoStore is wrapped when a store opened for reading does not exist
// (a mistyped directory): readers never create one.
var ErrNoStore = errors.New("the store does not exist")

// OpenDir opens an existing store directory; a missing one is an error
// wrapping ErrNoStore, and nothing is created (readers: list, restore,
// verify, …; a typo must not make an empty store that answers "no
// backups").
func OpenDir(root string) (*Dir, error) {
	return openDir(root, false)
}

func openDir(root string, create bool) (*Dir, error) {
	if root == "" {
		return nil, errors.New("store directory: empty path")
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("store directory %s: %w", root, err)
	}
	if create {
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("create store directory %s: %w", abs, err)
		}
	}
	st, err := os.Stat(abs)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store directory %s does not exist: %w (check --store; lifeboat snapshot and the agent create it)", abs, ErrNoStore)
	}
	if err != nil {
		return nil, fmt.Errorf("store directory %s: %w", abs, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("store directory %s: not a directory", abs)
	}
	return &Dir{root: abs}, nil
}

// Root returns the directory's absolute path.
func (d *Dir) Root() string { return d.root }

// String returns the store's URL.
func (d *Dir) String() string { return "file://" + d.root }

func (d *Dir) path(key string) (string, error) {
	clean := path.Clean("/" + key)
	if key == "" || strings.HasSuffix(key, "/") || clean != "/"+key {
		return "", fmt.Errorf("invalid object key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if strings.HasPrefix(part, tempPrefix) {
			return "", fmt.Errorf("invalid object key %q", key)
		}
	}
	return filepath.Join(d.root, filepath.FromSlash(key)), nil
}

// Put implements Store.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (ObjectInfo, error) {
	p, err := d.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	if err := mkdirAllSync(d.root, filepath.Dir(p)); err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", p, err)
	}
	h := sha256.New()
	var n int64
	err = writeback.WriteFileAtomic(p, writeback.FileOptions{
		Perm:       0o600,
		NoReplace:  true,
		TempPrefix: tempPrefix + filepath.Base(p) + "-",
		Chunk:      writebackChunk,
	}, func(w io.Writer) error {
		var err error
		n, err = io.CopyBuffer(io.MultiWriter(w, h), ctxReader{ctx, r}, make([]byte, 1<<20))
		if err != nil {
			return err
		}
		// Canceled while the last bytes were written: do not commit.
		return ctx.Err()
	})
	switch {
	case errors.Is(err, fs.ErrExist):
		return ObjectInfo{}, fmt.Errorf("put %s: %w (objects are never replaced: delete it first, or use another key)", p, ErrExists)
	case err != nil:
		return ObjectInfo{}, fmt.Errorf("put %s: %w", p, err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("put %s: %w", p, err)
	}
	return ObjectInfo{Key: key, Size: n, ModTime: st.ModTime(), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// LocalFile returns the path of key's object on this machine's file
// system, for a reader that uses the file in place, read-only (a drill of
// a plain backup): a regular file, not a link.
func (d *Dir) LocalFile(key string) (string, error) {
	p, err := d.path(key)
	if err != nil {
		return "", err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("get %s: %w", p, ErrNotFound)
	}
	if err != nil {
		return "", fmt.Errorf("get %s: %w", p, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("get %s: not a regular file", p)
	}
	return p, nil
}

// Get implements Store.
func (d *Dir) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("get %s: %w", p, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", p, err)
	}
	return f, nil
}

// GetRange implements RangeReader.
func (d *Dir) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := d.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	f := rc.(*os.File)
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, off, n), f}, nil
}

// Stat implements Store.
func (d *Dir) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := d.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	st, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", p, ErrNotFound)
	}
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	if st.IsDir() {
		return ObjectInfo{}, fmt.Errorf("stat %s: %w", p, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()}, nil
}

// List implements Store. Temporary files of unfinished Puts are skipped.
func (d *Dir) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	// Walk only the deepest directory that can hold matches.
	base := d.root
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		base = filepath.Join(d.root, filepath.FromSlash(prefix[:i]))
	}
	var infos []ObjectInfo
	err := filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == base {
				return filepath.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if strings.HasPrefix(e.Name(), tempPrefix) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		st, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted while listing
		}
		if err != nil {
			return err
		}
		infos = append(infos, ObjectInfo{Key: key, Size: st.Size(), ModTime: st.ModTime()})
		return nil
	})
	if err != nil {
		return fmt.Errorf("list %s: %w", filepath.Join(d.root, prefix), err)
	}
	sort.Slice(infos, func(i, j int) bool { return infos[i].Key < infos[j].Key })
	for _, o := range infos {
		if err := fn(o); err != nil {
			return err
		}
	}
	return nil
}

// Delete implements Store. Deleting a missing key is not an error.
func (d *Dir) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return syncDir(filepath.Dir(p))
}

// mkdirAllSync creates dir and its missing parents below root with mode
// 0700, fsyncing each parent so the new entries survive a crash.
func mkdirAllSync(root, dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir && parent != root {
		if err := mkdirAllSync(root, parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return syncDir(parent)
}

func syncDir(dir string) error { return writeback.SyncDir(dir) }

// writebackChunk is how many bytes Put writes before it starts writing them
// back, so the final fsync is small and the disk etcd shares sees no burst.
const writebackChunk = 8 << 20

// ctxReader makes a long copy stop when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
