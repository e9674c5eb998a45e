package snapshot

import (
	"io"
	"os"
	"testing"
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
