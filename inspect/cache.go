package inspect

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// Cache keeps fetched backups on local disk, decoded (the raw snapshot)
// and indexed, so that queries after the first read no store object.
//
// Layout: <Dir>/<cluster>/<backup id>/{snapshot.db,index,cached.json}.
// cached.json is written last, after the snapshot was checked against the
// manifest and indexed: it records the file's size, modification time and
// sha256, and its own modification time is the entry's last use (the LRU
// order). An entry is built under a temporary name and renamed, so a
// killed fetch leaves no entry. Directories are 0700, files 0600.
type Cache struct {
	// Dir is the cache's root.
	Dir string
	// MaxBytes bounds the cache's size: after an entry is added, the
	// least recently used others are removed until the total fits. An entry
	// in use is never removed; one backup larger than MaxBytes is kept
	// alone (with a warning).
	MaxBytes int64
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// OpenStats says how Open got its snapshot.
type OpenStats struct {
	// Fetched is true when the backup was downloaded; Reason says why
	// (not cached, or what was wrong with the cached copy).
	Fetched bool
	Reason  string
	// Rechecked is true when the cached copy's sha256 was recomputed
	// (its sidecar was missing or stale) and matched.
	Rechecked bool
	// Fetch is the download, decode and check; Index building the index.
	Fetch, Index time.Duration
	Evicted      []string
}

type sidecar struct {
	Format         int    `json:"format"`
	BackupID       string `json:"backup_id"`
	SnapshotSHA256 string `json:"snapshot_sha256"`
	Size           int64  `json:"size"`
	ModTimeNano    int64  `json:"mtime_unix_nano"`
	Revision       int64  `json:"revision"`
	Keys           int    `json:"keys"`
}

const (
	dbName      = "snapshot.db"
	indexName   = "index"
	sidecarName = "cached.json"
	tmpPrefix   = ".tmp-"
)

func (c *Cache) now() time.Time {
	if c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

func (c *Cache) entryDir(cluster, id string) string {
	return filepath.Join(c.Dir, url.PathEscape(cluster), id)
}

// Open returns backup m of repo as a Snapshot from the cache, fetching it
// first when it is not cached or when the cached copy does not match m.
// The caller closes the Snapshot.
func (c *Cache) Open(ctx context.Context, repo *repository.Repo, m *repository.Manifest, ids []age.Identity, lg *slog.Logger) (*Snapshot, OpenStats, error) {
	var st OpenStats
	if !repository.ValidID(m.ID) {
		return nil, st, fmt.Errorf("backup id %q is not valid", m.ID)
	}
	clusterDir := filepath.Join(c.Dir, url.PathEscape(repo.Cluster))
	if err := os.MkdirAll(clusterDir, 0o700); err != nil {
		return nil, st, fmt.Errorf("create cache dir %s: %w", clusterDir, err)
	}
	dir := c.entryDir(repo.Cluster, m.ID)
	reason, err := c.reuse(ctx, dir, m.ID, m.SnapshotSHA256, m.Revision, trailerDigest, &st)
	if err != nil {
		return nil, st, err
	}
	if reason != "" {
		st.Fetched, st.Reason = true, reason
		if reason != "not cached" {
			lg.Warn("cached copy of the backup is not usable: fetching it again", "backup_id", m.ID, "reason", reason, "path", dir)
		}
		if err := removeEntry(dir); err != nil {
			return nil, st, err
		}
		st.Evicted = c.evict(clusterDir, m.DBSize, "", lg)
		if err := c.fetch(ctx, repo, m, ids, clusterDir, dir, &st); err != nil {
			return nil, st, err
		}
	}
	s, err := OpenSnapshot(ctx, m.ID, filepath.Join(dir, dbName), filepath.Join(dir, indexName), m.SnapshotSHA256)
	if err != nil {
		return nil, st, fmt.Errorf("open cached backup %s: %w", m.ID, err)
	}
	now := c.now()
	os.Chtimes(filepath.Join(dir, sidecarName), now, now)
	st.Evicted = append(st.Evicted, c.evict(clusterDir, 0, dir, lg)...)
	return s, st, nil
}

// trailerDigest is the sha256 of a raw snapshot's database, checked
// against its trailer: what manifests record.
func trailerDigest(ctx context.Context, path string) (string, error) {
	return verify.Trailer(ctx, path)
}

// fileDigest is the sha256 of a whole file.
func fileDigest(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), ctx.Err()
}

// reuse checks a cached entry against the sha256 it must have (empty:
// the sidecar's, for built entries, whose revision is the sidecar's too):
// "" when it can be used, else why not. An index it rebuilds records rev.
func (c *Cache) reuse(ctx context.Context, dir, id, want string, rev int64, digestOf func(context.Context, string) (string, error), st *OpenStats) (string, error) {
	db := filepath.Join(dir, dbName)
	fi, err := os.Stat(db)
	if errors.Is(err, fs.ErrNotExist) {
		return "not cached", nil
	} else if err != nil {
		return "", fmt.Errorf("stat cached backup %s: %w", db, err)
	}
	var sc sidecar
	b, err := os.ReadFile(filepath.Join(dir, sidecarName))
	known := err == nil && json.Unmarshal(b, &sc) == nil && sc.Format == 1 && sc.BackupID == id
	if want == "" {
		// A built entry (a point in time) has no manifest: its sha256 and
		// revision are what the sidecar recorded when it was built. One
		// without a revision (an older lifeboat rebuilt its index with
		// revision 0) is built again.
		switch {
		case !known:
			return "no record of the built snapshot's sha256", nil
		case sc.Revision <= 0:
			return "no record of the built snapshot's revision", nil
		}
		want, rev = sc.SnapshotSHA256, sc.Revision
	}
	fresh := known && sc.SnapshotSHA256 == want && sc.Size == fi.Size() && sc.ModTimeNano == fi.ModTime().UnixNano()
	if !fresh {
		// The sidecar is missing or stale: recompute the sha256.
		digest, err := digestOf(ctx, db)
		if err != nil {
			if ctx.Err() != nil {
				return "", err
			}
			return fmt.Sprintf("the cached snapshot is damaged: %v", err), nil
		}
		if digest != want {
			return fmt.Sprintf("the cached snapshot's sha256 is %s, it should be %s", digest, want), nil
		}
		st.Rechecked = true
	}
	if ix, err := openIndex(filepath.Join(dir, indexName), want); err != nil || !fresh {
		if err == nil {
			ix.close()
		}
		t := c.now()
		n, err := writeIndex(ctx, db, filepath.Join(dir, indexName), rev, want)
		if err != nil {
			return fmt.Sprintf("index the cached snapshot: %v", err), nil
		}
		st.Index += c.now().Sub(t)
		if err := writeSidecar(dir, id, want, rev, n); err != nil {
			return "", err
		}
	} else {
		ix.close()
	}
	return "", nil
}

func (c *Cache) fetch(ctx context.Context, repo *repository.Repo, m *repository.Manifest, ids []age.Identity, clusterDir, dir string, st *OpenStats) error {
	c.sweep(clusterDir)
	tmp := filepath.Join(clusterDir, tmpPrefix+m.ID+"-"+strconv.Itoa(os.Getpid()))
	os.RemoveAll(tmp)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return fmt.Errorf("create cache entry %s: %w", tmp, err)
	}
	defer os.RemoveAll(tmp)
	t := c.now()
	db := filepath.Join(tmp, dbName)
	if _, err := repository.Fetch(ctx, repo, m, db, repository.FetchOptions{Identities: ids}); err != nil {
		return fmt.Errorf("fetch backup %s: %w", m.ID, err)
	}
	st.Fetch = c.now().Sub(t)
	// The checks lifeboat fetch makes (bbolt structure, status against the
	// manifest) hand every record of the key bucket to the index builder
	// as they read it: one pass over the file for both, and nothing is
	// committed unless both succeed.
	t = c.now()
	b := newIndexBuilder(ctx, tmp)
	defer b.close()
	if _, err := repository.CheckFileRecords(ctx, db, m, b); err != nil {
		if ierr := b.failed(); ierr != nil {
			return fmt.Errorf("index %s: %w", m.ID, ierr)
		}
		return fmt.Errorf("backup %s failed verification: %w", m.ID, err)
	}
	n, err := writeIndexWith(filepath.Join(tmp, indexName), func(w io.Writer) (int, error) {
		return b.finish(m.Revision, m.SnapshotSHA256, w)
	})
	if err != nil {
		return fmt.Errorf("index %s: %w", m.ID, err)
	}
	if err := writeSidecar(tmp, m.ID, m.SnapshotSHA256, m.Revision, n); err != nil {
		return err
	}
	st.Index = c.now().Sub(t)
	return c.rename(tmp, dir, clusterDir)
}

// commit indexes the snapshot in tmp, writes its sidecar and renames tmp
// to dir.
func (c *Cache) commit(ctx context.Context, tmp, dir, clusterDir, id, sha string, rev int64, st *OpenStats) error {
	if err := c.index(ctx, tmp, id, sha, rev, st); err != nil {
		return err
	}
	return c.rename(tmp, dir, clusterDir)
}

// index writes the index and the sidecar of the snapshot in tmp.
func (c *Cache) index(ctx context.Context, tmp, id, sha string, rev int64, st *OpenStats) error {
	t := c.now()
	db := filepath.Join(tmp, dbName)
	n, err := writeIndex(ctx, db, filepath.Join(tmp, indexName), rev, sha)
	if err != nil {
		return fmt.Errorf("index %s: %w", id, err)
	}
	st.Index = c.now().Sub(t)
	return writeSidecar(tmp, id, sha, rev, n)
}

// rename commits a built entry: tmp becomes dir.
func (c *Cache) rename(tmp, dir, clusterDir string) error {
	if err := syncDir(tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, sidecarName)); serr == nil {
			return nil // another process cached it meanwhile
		}
		return fmt.Errorf("commit cache entry %s: %w", dir, err)
	}
	return syncDir(clusterDir)
}

func writeIndex(ctx context.Context, db, path string, rev int64, sha string) (int, error) {
	return writeIndexWith(path, func(w io.Writer) (int, error) {
		return buildIndex(ctx, db, rev, sha, filepath.Dir(path), w)
	})
}

// writeIndexWith writes the index at path through build, durably: a
// temporary file, synced, renamed.
func writeIndexWith(path string, build func(io.Writer) (int, error)) (int, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp)
	n, err := build(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return n, os.Rename(tmp, path)
}

func writeSidecar(dir, id, sha string, rev int64, keys int) error {
	fi, err := os.Stat(filepath.Join(dir, dbName))
	if err != nil {
		return err
	}
	b, _ := json.MarshalIndent(sidecar{Format: 1, BackupID: id, SnapshotSHA256: sha,
		Size: fi.Size(), ModTimeNano: fi.ModTime().UnixNano(), Revision: rev, Keys: keys}, "", "  ")
	path := filepath.Join(dir, sidecarName)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// sweep removes temporary entries older than a day: fetches killed
// before their rename.
func (c *Cache) sweep(clusterDir string) {
	es, _ := os.ReadDir(clusterDir)
	for _, e := range es {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		p := filepath.Join(clusterDir, e.Name())
		if fi, err := e.Info(); err == nil && fi.IsDir() && c.now().Sub(fi.ModTime()) > 24*time.Hour && onlyOurs(p) {
			os.RemoveAll(p)
		}
	}
}

// removeEntry removes a cache entry that is not usable, refusing a
// directory that holds anything else.
func removeEntry(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if !onlyOurs(dir) {
		return fmt.Errorf("cache entry %s holds files the cache did not write: refusing to replace it (remove it, or give another --cache-dir)", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove cached copy %s: %w", dir, err)
	}
	return nil
}

// onlyOurs says whether dir holds nothing but files a cache entry is
// made of, so that removing it cannot remove anything else (a --cache-dir
// given by mistake as a directory of other data).
func onlyOurs(dir string) bool {
	es, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range es {
		n := e.Name()
		switch {
		case !e.Type().IsRegular():
			return false
		case n == dbName, n == indexName, n == sidecarName, strings.HasSuffix(n, ".tmp"), strings.HasPrefix(n, ".index-run-"):
		default:
			return false
		}
	}
	return true
}

type cacheEntry struct {
	dir  string
	size int64
	used time.Time
}

// entries lists the cache's entries (every cluster).
func (c *Cache) entries() []cacheEntry {
	var out []cacheEntry
	clusters, _ := os.ReadDir(c.Dir)
	for _, cl := range clusters {
		if !cl.IsDir() {
			continue
		}
		ids, _ := os.ReadDir(filepath.Join(c.Dir, cl.Name()))
		for _, id := range ids {
			if !id.IsDir() || strings.HasPrefix(id.Name(), tmpPrefix) {
				continue
			}
			dir := filepath.Join(c.Dir, cl.Name(), id.Name())
			// Only entries this cache wrote are ever removed: a sidecar
			// naming the directory, and nothing but the cache's files.
			var sc sidecar
			if b, err := os.ReadFile(filepath.Join(dir, sidecarName)); err != nil || json.Unmarshal(b, &sc) != nil ||
				sc.Format != 1 || sc.BackupID != id.Name() || !onlyOurs(dir) {
				continue
			}
			e := cacheEntry{dir: dir}
			files, _ := os.ReadDir(dir)
			for _, f := range files {
				if fi, err := f.Info(); err == nil {
					e.size += fi.Size()
					if f.Name() == sidecarName {
						e.used = fi.ModTime()
					}
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// evict removes least recently used entries other than keep until the
// cache holds at most MaxBytes - room.
func (c *Cache) evict(_ string, room int64, keep string, lg *slog.Logger) []string {
	if c.MaxBytes <= 0 {
		return nil
	}
	es := c.entries()
	var total int64
	for _, e := range es {
		total += e.size
	}
	slices.SortFunc(es, func(a, b cacheEntry) int { return a.used.Compare(b.used) })
	var removed []string
	for _, e := range es {
		if total+room <= c.MaxBytes {
			break
		}
		if e.dir == keep {
			continue
		}
		if err := os.RemoveAll(e.dir); err != nil {
			lg.Warn("remove a cached backup", "path", e.dir, "err", err)
			continue
		}
		total -= e.size
		removed = append(removed, filepath.Base(e.dir))
	}
	if total+room > c.MaxBytes {
		lg.Warn("the cache holds more than its maximum size: one backup is larger than it", "bytes", total+room, "max_bytes", c.MaxBytes)
	}
	return removed
}

// BuildFunc writes a database (a raw snapshot or a bare bbolt file) at
// path, which does not exist yet, and returns its revision (positive: the
// cache records it, and an index rebuilt later from the cached file
// records it again).
type BuildFunc func(ctx context.Context, path string) (revision int64, err error)

// OpenBuilt returns the snapshot cached under name for cluster, building
// it with build when it is not cached or its cached copy no longer
// matches the sha256 recorded when it was built: a point in time (a
// snapshot with captured changes replayed onto it) is built once and
// served from the cache afterwards. name must identify the content
// (e.g. the generation and the revision) and be a plain file name.
func (c *Cache) OpenBuilt(ctx context.Context, cluster, name string, build BuildFunc, lg *slog.Logger) (*Snapshot, OpenStats, error) {
	var st OpenStats
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return nil, st, fmt.Errorf("cache entry name %q is not a plain file name", name)
	}
	clusterDir := filepath.Join(c.Dir, url.PathEscape(cluster))
	if err := os.MkdirAll(clusterDir, 0o700); err != nil {
		return nil, st, fmt.Errorf("create cache dir %s: %w", clusterDir, err)
	}
	dir := c.entryDir(cluster, name)
	reason, err := c.reuse(ctx, dir, name, "", 0, fileDigest, &st) // want and rev: the sidecar's
	if err != nil {
		return nil, st, err
	}
	if reason != "" {
		st.Fetched, st.Reason = true, reason
		if _, err := os.Stat(dir); err == nil {
			lg.Warn("cached copy is not usable: building it again", "entry", name, "reason", reason, "path", dir)
		}
		if err := removeEntry(dir); err != nil {
			return nil, st, err
		}
		c.sweep(clusterDir)
		tmp := filepath.Join(clusterDir, tmpPrefix+name+"-"+strconv.Itoa(os.Getpid()))
		os.RemoveAll(tmp)
		if err := os.Mkdir(tmp, 0o700); err != nil {
			return nil, st, fmt.Errorf("create cache entry %s: %w", tmp, err)
		}
		defer os.RemoveAll(tmp)
		t := c.now()
		db := filepath.Join(tmp, dbName)
		rev, err := build(ctx, db)
		if err != nil {
			return nil, st, err
		}
		if rev <= 0 {
			return nil, st, fmt.Errorf("build %s: revision %d: the builder must say the built snapshot's revision", name, rev)
		}
		os.Chmod(db, 0o600)
		sha, err := fileDigest(ctx, db)
		if err != nil {
			return nil, st, err
		}
		st.Fetch = c.now().Sub(t)
		st.Evicted = c.evict(clusterDir, 0, "", lg)
		if err := c.commit(ctx, tmp, dir, clusterDir, name, sha, rev, &st); err != nil {
			return nil, st, err
		}
	}
	var sc sidecar
	b, err := os.ReadFile(filepath.Join(dir, sidecarName))
	if err == nil {
		err = json.Unmarshal(b, &sc)
	}
	if err != nil {
		return nil, st, fmt.Errorf("read %s: %w", filepath.Join(dir, sidecarName), err)
	}
	s, err := OpenSnapshot(ctx, name, filepath.Join(dir, dbName), filepath.Join(dir, indexName), sc.SnapshotSHA256)
	if err != nil {
		return nil, st, fmt.Errorf("open cached %s: %w", name, err)
	}
	now := c.now()
	os.Chtimes(filepath.Join(dir, sidecarName), now, now)
	st.Evicted = append(st.Evicted, c.evict(clusterDir, 0, dir, lg)...)
	return s, st, nil
}
