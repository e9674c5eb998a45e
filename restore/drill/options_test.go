package drill_test

import (
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// TestDrillRefusesBadOptions checks that Drill, called as a library, refuses
// the values the configuration refuses (drill.check_prefixes, a negative
// drill.timeout) before it fetches anything.
func TestDrillRefusesBadOptions(t *testing.T) {
	b := restoretest.DirRepo(t, t.TempDir())
	for _, tc := range []struct {
		name string
		edit func(*drill.Options)
		want string
	}{
		{"empty check prefix", func(o *drill.Options) { o.CheckPrefixes = []string{"/registry/", ""} }, "drill: check prefixes: entry 2: empty prefix"},
		{"negative timeout", func(o *drill.Options) { o.Timeout = -time.Minute }, "drill: timeout -1m0s: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			scratch := t.TempDir()
			o := drill.Options{Backups: b, Manifest: &repository.Manifest{ID: "20260101T000000Z-0000"}, ScratchDir: scratch}
			tc.edit(&o)
			_, err := drill.Run(t.Context(), o)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Drill: got error %v, want %q", err, tc.want)
			}
			restoretest.AssertEmpty(t, scratch)
		})
	}
}
