package restore

import (
	"errors"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestCheckSplice: the segment a replay continues with after planning
// again must continue a segment it applied (its PrevHash that one's chain
// hash, beginning right after it) and reach past what it applied; a
// segment that names none of them, begins elsewhere or ends inside what
// was applied is refused as a broken chain, never applied.
func TestCheckSplice(t *testing.T) {
	w := &repository.Window{Generation: "g", Anchor: &repository.Manifest{ID: "g", EtcdClusterID: "2a"}}
	link := func(key string, first, last int64, prev, hash string) repository.ChainLink {
		return repository.ChainLink{Key: key, Hash: hash, Header: repository.SegmentHeader{
			Generation: "g", ClusterID: 0x2a, First: first, Last: last, CapturedThrough: last, PrevHash: prev, Token: 1}}
	}
	a, b := link("a", 11, 15, "h0", "ha"), link("b", 16, 20, "ha", "hb")
	seen := []repository.ChainLink{a, b}
	for _, tc := range []struct {
		name string
		cur  repository.ChainLink
		want repository.ChainProblem // "" accepted
	}{
		{"continues the last", link("c", 21, 30, "hb", "hc"), ""},
		{"overlaps the applied, continues an earlier", link("c", 16, 30, "ha", "hc"), ""},
		{"names no applied segment", link("c", 16, 30, "hx", "hc"), repository.ChainBadHash},
		{"begins after a gap", link("c", 22, 30, "hb", "hc"), repository.ChainGap},
		{"ends inside the applied", link("c", 16, 19, "ha", "hc"), repository.ChainOverlap},
		{"another generation", func() repository.ChainLink { l := link("c", 21, 30, "hb", "hc"); l.Header.Generation = "h"; return l }(), repository.ChainMismatch},
	} {
		err := checkSplice(w, &a, seen, tc.cur)
		var ce *repository.ChainError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want it accepted", tc.name, err)
		case tc.want != "" && (!errors.As(err, &ce) || ce.Problem != tc.want):
			t.Errorf("%s: %v, want a %q chain error", tc.name, err, tc.want)
		}
	}
}
