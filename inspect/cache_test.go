package inspect

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
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
