package inspect

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestEvictOnlyOwnEntries: eviction removes least recently used entries
// the cache wrote, never other data under a --cache-dir given by mistake.
func TestEvictOnlyOwnEntries(t *testing.T) {
	dir := t.TempDir()
	write := func(p string, b []byte) {
		t.Helper()
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	entry := func(cluster, id string, used time.Time) string {
		d := filepath.Join(dir, cluster, id)
		write(filepath.Join(d, dbName), make([]byte, 1000))
		write(filepath.Join(d, indexName), make([]byte, 100))
		b, _ := json.Marshal(sidecar{Format: 1, BackupID: id})
		write(filepath.Join(d, sidecarName), b)
		os.Chtimes(filepath.Join(d, sidecarName), used, used)
		return d
	}
	now := time.Now()
	old := entry("prod", "20261201T000000Z-r1", now.Add(-2*time.Hour))
	mid := entry("prod", "20261201T010000Z-r2", now.Add(-time.Hour))
	newest := entry("prod", "20261201T020000Z-r3", now)
	write(filepath.Join(dir, "photos", "2025", "beach.jpg"), make([]byte, 5000))
	foreign := filepath.Join(dir, "prod", "20261201T030000Z-r4")
	write(filepath.Join(foreign, dbName), make([]byte, 5000))
	write(filepath.Join(foreign, "notes.txt"), []byte("mine"))
	write(filepath.Join(foreign, sidecarName), []byte(`{"format":1,"backup_id":"20261201T030000Z-r4"}`))

	c := &Cache{Dir: dir, MaxBytes: 2500}
	removed := c.evict("", 0, newest, slog.New(slog.DiscardHandler))
	if want := []string{filepath.Base(old)}; !slices.Equal(removed, want) {
		t.Errorf("evicted %v, want %v (the least recently used first, until 2 entries of 1100 bytes fit)", removed, want)
	}
	for _, p := range []string{mid, newest, filepath.Join(dir, "photos", "2025", "beach.jpg"), filepath.Join(foreign, "notes.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s removed: %v", p, err)
		}
	}
	c.MaxBytes = 1
	c.evict("", 0, newest, slog.New(slog.DiscardHandler))
	if _, err := os.Stat(mid); err == nil {
		t.Error("an own entry above the bound was kept")
	}
	if _, err := os.Stat(filepath.Join(foreign, "notes.txt")); err != nil {
		t.Errorf("a directory holding other files was removed: %v", err)
	}
	if err := removeEntry(foreign); err == nil {
		t.Error("removeEntry removed a directory holding other files")
	}
}

// TestOpenBuiltKeepsRevision: a built entry (a point in time) whose index
// is rebuilt from the cached file (the index lost, the sidecar stale)
// still has the revision it was built at, not 0; an entry whose sidecar
// records no revision (written so by an older lifeboat) is built again.
func TestOpenBuiltKeepsRevision(t *testing.T) {
	ctx := t.Context()
	lg := slog.New(slog.DiscardHandler)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	resp, err := cli.Put(ctx, "/registry/configmaps/shop/web", "v")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	src := filepath.Join(t.TempDir(), "snap.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(src)
	io.Copy(f, rc)
	rc.Close()
	f.Close()
	builds := 0
	build := func(ctx context.Context, path string) (int64, error) {
		builds++
		b, err := os.ReadFile(src)
		if err != nil {
			return 0, err
		}
		return rev, os.WriteFile(path, b, 0o600)
	}
	cache := &Cache{Dir: t.TempDir()}
	const name = "g1@r5"
	entry := filepath.Join(cache.Dir, "prod", name)
	open := func(t *testing.T) {
		t.Helper()
		s, _, err := cache.OpenBuilt(ctx, "prod", name, build, lg)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Revision != rev {
			t.Errorf("revision %d, want %d", s.Revision, rev)
		}
		if _, err := s.Get(ctx, "/registry/configmaps/shop/web"); err != nil {
			t.Errorf("get: %v", err)
		}
		var sc sidecar
		b, _ := os.ReadFile(filepath.Join(entry, sidecarName))
		if err := json.Unmarshal(b, &sc); err != nil || sc.Revision != rev {
			t.Errorf("sidecar revision %d (%v), want %d", sc.Revision, err, rev)
		}
	}
	open(t)
	for _, tc := range []struct {
		name       string
		damage     func(t *testing.T)
		wantBuilds int
	}{
		{"index lost", func(t *testing.T) { os.Remove(filepath.Join(entry, indexName)) }, 1},
		{"sidecar stale", func(t *testing.T) {
			later := time.Now().Add(time.Hour)
			os.Chtimes(filepath.Join(entry, dbName), later, later)
		}, 1},
		{"sidecar without a revision", func(t *testing.T) {
			var sc sidecar
			b, _ := os.ReadFile(filepath.Join(entry, sidecarName))
			json.Unmarshal(b, &sc)
			sc.Revision = 0
			b, _ = json.Marshal(sc)
			os.WriteFile(filepath.Join(entry, sidecarName), b, 0o600)
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.damage(t)
			open(t)
			if builds != tc.wantBuilds {
				t.Errorf("%d builds, want %d", builds, tc.wantBuilds)
			}
		})
	}
}
