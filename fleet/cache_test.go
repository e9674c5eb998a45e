package fleet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// cacheFleet writes three clusters into the bucket: hourly backups, a
// drill report and a status document each.
func cacheFleet(t *testing.T, st uploader.Store, now time.Time) {
	t.Helper()
	for _, name := range []string{"one", "two", "three"} {
		synthetic(t, st, name, "aa01", now.Add(-3*time.Hour), now.Add(-2*time.Hour), now.Add(-time.Hour))
		putDrill(t, st, name, now.Add(-30*time.Minute), true)
		status(t, st, name, "@hourly", now)
	}
}

// putDrill stores a drill report of the cluster's newest backup.
func putDrill(t *testing.T, st uploader.Store, name string, start time.Time, passed bool) {
	t.Helper()
	r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: mustNewest(t, st, name), Cluster: name,
		StartedAt: start, FinishedAt: start.Add(time.Minute), Passed: passed, RecoverySeconds: 9}
	if !passed {
		r.Error = "restored etcd did not become healthy"
	}
	if err := repository.New(st, name).PutDrillReport(t.Context(), r); err != nil {
		t.Fatal(err)
	}
}

func readWith(t *testing.T, r *Reader, st uploader.Store) []Cluster {
	t.Helper()
	cs, err := r.Read(t.Context(), []Source{{Name: "bucket", Store: st}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestReaderCache: a second read, and a read by a new Reader from the
// cache file after a restart, fetch no object when nothing changed; a
// changed cluster is read again and its new objects only; a deleted
// object is never served from the cache; the file is 0600 in a 0700
// directory.
func TestReaderCache(t *testing.T) {
	fs := newFleetStores(t)
	now := time.Now().UTC()
	cacheFleet(t, fs.s3, now)
	dir := filepath.Join(t.TempDir(), "cache")

	r, err := NewCachedReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	fs.proxy.ResetCounts()
	cold := readWith(t, r, fs.s3)
	if n := fs.proxy.Count("GetObject"); n < 3*5 {
		t.Fatalf("cold read: %d GETs, want every manifest, report, status document read", n)
	}
	checkPerms(t, dir)
	if n := len(cacheFiles(t, dir)); n != 3+1 {
		t.Errorf("cache files: %d, want one per cluster and the agents' documents", n)
	}
	checkReleased(t, r)

	fs.proxy.ResetCounts()
	if got := readWith(t, r, fs.s3); !cmp.Equal(cold, got, cmp.AllowUnexported(Cluster{})) {
		t.Errorf("refresh differs from the cold read:\n%s", cmp.Diff(cold, got, cmp.AllowUnexported(Cluster{})))
	}
	if n := fs.proxy.Count("GetObject"); n != 0 {
		t.Errorf("refresh with nothing changed: %d GETs, want 0", n)
	}

	// A cluster gone while no hub ran: its file is removed by the next
	// full read.
	stale := filepath.Join(dir, CacheFile, hashName("bucket"), "c-"+hashName("gone"))
	if err := saveFile(stale, fileState{Source: "bucket", Cluster: "gone"}); err != nil {
		t.Fatal(err)
	}
	restarted, err := NewCachedReader(dir)
	if err != nil {
		t.Fatal(err)
	}
	fs.proxy.ResetCounts()
	if got := readWith(t, restarted, fs.s3); !cmp.Equal(cold, got, cmp.AllowUnexported(Cluster{})) {
		t.Errorf("read after a restart differs from the cold read:\n%s", cmp.Diff(cold, got, cmp.AllowUnexported(Cluster{})))
	}
	if n := fs.proxy.Count("GetObject"); n != 0 {
		t.Errorf("read after a restart with nothing changed: %d GETs, want 0 (the cache file)", n)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file of a cluster gone: %v, want it removed", err)
	}

	// One cluster changes: a new backup and a failed drill of it; only
	// its two new objects (and its kit: none) are fetched.
	synthetic(t, fs.s3, "two", "aa01", now.Add(-time.Minute))
	putDrill(t, fs.s3, "two", now.Add(-10*time.Minute), false)
	fs.proxy.ResetCounts()
	cs := readWith(t, restarted, fs.s3)
	if n := fs.proxy.Count("GetObject"); n != 2 {
		t.Errorf("one cluster with 2 new objects: %d GETs, want 2", n)
	}
	byName := map[string]Cluster{}
	for _, c := range cs {
		byName[c.Name] = c
	}
	if c := byName["two"]; c.Backups != 4 || c.Drill == nil || c.Drill.State != repository.DrillFailed {
		t.Errorf("two after the change: %d backups, drill %+v; want 4 and the failed drill", c.Backups, c.Drill)
	}

	// A manifest deleted: the listing decides, the cache never answers
	// for it.
	gone := repository.New(fs.s3, "one").ManifestKey(mustNewest(t, fs.s3, "one"))
	if err := fs.s3.Delete(t.Context(), gone); err != nil {
		t.Fatal(err)
	}
	cs = readWith(t, restarted, fs.s3)
	for _, c := range cs {
		if c.Name == "one" && c.Backups != 2 {
			t.Errorf("one after deleting its newest manifest: %d backups, want 2", c.Backups)
		}
	}
}

// TestReaderCacheUnusable: a cache file that is corrupt, truncated or of
// another version is reported and ignored: the read is the cold one.
func TestReaderCacheUnusable(t *testing.T) {
	fs := newFleetStores(t)
	now := time.Now().UTC()
	cacheFleet(t, fs.s3, now)
	want := readWith(t, NewReader(), fs.s3)

	for name, damage := range map[string]func([]byte) []byte{
		"flipped":   func(b []byte) []byte { b[len(b)/2] ^= 0xff; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)/3] },
		"version":   func(b []byte) []byte { return append([]byte("lifeboat fleet cache 0\n"), b[len(cacheMagic):]...) },
		"empty":     func([]byte) []byte { return nil },
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			r, err := NewCachedReader(dir)
			if err != nil {
				t.Fatal(err)
			}
			readWith(t, r, fs.s3)
			for _, path := range cacheFiles(t, dir) {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, damage(b), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, err = NewCachedReader(dir)
			if err == nil {
				t.Fatal("NewCachedReader of a damaged cache: no error")
			}
			fs.proxy.ResetCounts()
			if got := readWith(t, r, fs.s3); !cmp.Equal(want, got, cmp.AllowUnexported(Cluster{})) {
				t.Errorf("read with a damaged cache:\n%s", cmp.Diff(want, got, cmp.AllowUnexported(Cluster{})))
			}
			if fs.proxy.Count("GetObject") == 0 {
				t.Error("read with a damaged cache fetched nothing: it must read cold")
			}
			if _, err := NewCachedReader(dir); err != nil {
				t.Errorf("the cache rewritten after the cold read: %v", err)
			}
		})
	}
}

// checkReleased: with a cache directory, no cluster's documents stay
// in memory after a read (only the agents' status documents).
func checkReleased(t *testing.T, r *Reader) {
	t.Helper()
	for name, c := range r.docs {
		for cluster, cd := range c.clusters {
			if cd.docs != nil {
				t.Errorf("%s %s: %d documents kept in memory after the read, want none (on disk)", name, cluster, len(cd.docs))
			}
		}
		for k := range c.hot {
			if !isHot(k) {
				t.Errorf("%s: %s kept in memory", name, k)
			}
		}
	}
}

// cacheFiles are the files of the cache in dir.
func cacheFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(filepath.Join(dir, CacheFile), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	if err != nil || len(out) == 0 {
		t.Fatalf("the cache files in %s: %v, %d files", dir, err, len(out))
	}
	return out
}

// checkPerms: the cache's directories are 0700, its files 0600.
func checkPerms(t *testing.T, dir string) {
	t.Helper()
	checkPerm(t, dir, 0o700)
	err := filepath.WalkDir(filepath.Join(dir, CacheFile), func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			checkPerm(t, p, 0o700)
		} else {
			checkPerm(t, p, 0o600)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func checkPerm(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fi.Mode().Perm(); got != want {
		t.Errorf("%s: mode %v, want %v", path, got, want)
	}
}

// FuzzLoadCache: any bytes in a cache file give its documents or an
// error, never a panic.
func FuzzLoadCache(f *testing.F) {
	dir := f.TempDir()
	path := filepath.Join(dir, "c-a")
	docs := map[string]doc{"a/snapshots/x.json": {Size: 2, ModTime: time.Unix(1, 0), Data: []byte("{}")}}
	if err := saveFile(path, fileState{Source: "bucket", Cluster: "a", Docs: docs}); err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add([]byte(cacheMagic))
	f.Add([]byte{})
	f.Add(append([]byte(cacheMagic), make([]byte, 40)...))
	f.Fuzz(func(t *testing.T, data []byte) {
		p := filepath.Join(t.TempDir(), "c-a")
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		docs, err := loadFile(p, "bucket", "a")
		if err != nil && docs != nil {
			t.Errorf("loadFile failed (%v) but returned %d documents", err, len(docs))
		}
	})
}
