package snapshot_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestTakeRefusesBadOptions checks that Take, called as a library, refuses
// the values the configuration refuses (a negative snapshot.stall_timeout
// or snapshot.timeout, which it used to read as the default and as no
// limit) before it creates the spool file.
func TestTakeRefusesBadOptions(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	for _, tc := range []struct {
		name string
		opts snapshot.Options
		want string
	}{
		{"negative stall timeout", snapshot.Options{StallTimeout: -time.Second}, "snapshot: stall timeout -1s: must not be negative"},
		{"negative timeout", snapshot.Options{Timeout: -time.Minute}, "snapshot: timeout -1m0s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spool := filepath.Join(t.TempDir(), "snap.db")
			_, err := take(t.Context(), configFor(c), spool, nil, tc.opts, nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Take: got error %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(spool); !os.IsNotExist(err) {
				t.Errorf("spool %s: got %v, want it not created", spool, err)
			}
		})
	}
}
