package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestRestorePrintsQuota (issue 31): a restored database near or above
// etcd's default 2 GiB quota gets --quota-backend-bytes in the start
// instructions (without it the restored cluster refuses writes); a small
// one does not.
func TestRestorePrintsQuota(t *testing.T) {
	for _, tc := range []struct {
		size int64
		want bool
	}{{1 << 20, false}, {2600 << 20, true}} {
		dir := t.TempDir()
		db := filepath.Join(dir, "member", "snap", "db")
		if err := os.MkdirAll(filepath.Dir(db), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(db, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(db, tc.size); err != nil { // sparse: no disk used
			t.Fatal(err)
		}
		var out bytes.Buffer
		printQuota(&out, []restore.RestoredMember{{Name: "m1", DataDir: dir}})
		if got := strings.Contains(out.String(), "--quota-backend-bytes"); got != tc.want {
			t.Errorf("a %d-byte database: quota advice %v, want %v: %q", tc.size, got, tc.want, out.String())
		}
	}
}
