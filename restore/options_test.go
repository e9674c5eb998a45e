package restore_test

import (
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestDrillRefusesBadOptions checks that Drill, called as a library, refuses
// the values the configuration refuses (drill.check_prefixes, a negative
// drill.timeout) before it fetches anything.
func TestDrillRefusesBadOptions(t *testing.T) {
	b := dirBackups(t, t.TempDir())
	for _, tc := range []struct {
		name string
		edit func(*restore.DrillOptions)
		want string
	}{
		{"empty check prefix", func(o *restore.DrillOptions) { o.CheckPrefixes = []string{"/registry/", ""} }, "drill: check prefixes: entry 2: empty prefix"},
		{"negative timeout", func(o *restore.DrillOptions) { o.Timeout = -time.Minute }, "drill: timeout -1m0s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			o := restore.DrillOptions{Backups: b, Manifest: &repository.Manifest{ID: "20260101T000000Z-0000"}, ScratchDir: scratch}
			tc.edit(&o)
			_, err := restore.Drill(t.Context(), o)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Drill: got error %v, want %q", err, tc.want)
			}
			assertEmpty(t, scratch)
		})
	}
}
