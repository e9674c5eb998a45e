package snapshot

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestCreateSpool: the spool file has no name in its directory, on the
// O_TMPFILE path and on the fallback, and readers open it by SpoolPath.
func TestCreateSpool(t *testing.T) {
	for _, tc := range []struct {
		name   string
		create func(dir string) (*os.File, error)
	}{
		{"CreateSpool", CreateSpool},
		{"unlinked fallback", createUnlinked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			f, err := tc.create(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("spool dir holds %v", entries)
			}
			if fi, err := f.Stat(); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("spool file mode %v (%v), want 0600", fi.Mode(), err)
			}
			if _, err := f.Write([]byte("snapshot bytes")); err != nil {
				t.Fatal(err)
			}
			r, err := os.Open(SpoolPath(f))
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			got, err := io.ReadAll(r)
			if err != nil || string(got) != "snapshot bytes" {
				t.Errorf("read by SpoolPath: %q, %v", got, err)
			}
		})
	}
}

// TestSweepSpool: leftovers of older versions (named spool files, the
// fallback's files) go once untouched for LeftoverAge; a fresh one (a
// snapshot in progress) and other files stay.
func TestSweepSpool(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	old := now.Add(-2 * LeftoverAge)
	files := map[string]time.Time{
		"lifeboat-20261130T113800Z-r42-abcd.db.part": old, // removed
		".lifeboat-spool-123":                        old, // removed
		"lifeboat-20261201T113800Z-r43-ef01.db.part": now, // in progress: kept
		"notes.txt":     old, // not ours: kept
		"lifeboat-x.db": old, // not a spool name: kept
	}
	for name, mt := range files {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := SweepSpool(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{".lifeboat-spool-123", "lifeboat-20261130T113800Z-r42-abcd.db.part"}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	left, _ := os.ReadDir(dir)
	if len(left) != 3 {
		t.Errorf("left %v, want the fresh spool file and the two others", left)
	}
}
