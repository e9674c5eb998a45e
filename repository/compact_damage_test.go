package repository_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCompactDamage: compaction over a damaged source fails naming it,
// records it (found by compaction), and the next plan leaves it alone:
// the window ends before it and what lies before is still compacted.
func TestCompactDamage(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := dirBackups(t, dir)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	var ranges [][2]int64
	for i := range int64(8) {
		ranges = append(ranges, [2]int64{s + 1 + i, s + 1 + i})
	}
	putChain(t, b, m.ID, s, ranges)
	w := windows(t, b)[0]
	// Store times: one segment every 10 s from t0.
	for i, si := range w.Segments {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		if err := os.Chtimes(filepath.Join(dir, "store", si.Object.Key), at, at); err != nil {
			t.Fatal(err)
		}
	}
	w = windows(t, b)[0]
	bad := w.Segments[4]
	flipByte(t, dir, bad.Object.Key)
	p := repository.CompactPolicy{Levels: []time.Duration{time.Minute}, Settle: time.Second, Grace: time.Minute}
	now := t0.Add(5 * time.Minute)
	plan := repository.PlanCompaction(w, p, now)
	if len(plan.Steps) != 1 {
		t.Fatalf("plan %+v, want one step", plan.Steps)
	}
	enc := repository.Encoding{Compression: "zstd"}
	_, err := b.Compact(ctx, plan.Steps[0], p, enc, nil)
	if de := repository.AsDamage(err); de == nil || de.Key != bad.Object.Key || !strings.Contains(err.Error(), bad.Object.Key) {
		t.Fatalf("Compact over a damaged source: %v, want a *DamageError naming %s", err, bad.Object.Key)
	}
	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := l.DamageOf(bad.Object.Key); d == nil || d.FoundBy != repository.FoundByCompaction {
		t.Fatalf("damage not recorded: %+v", l.Damage)
	}
	w = windows(t, b)[0]
	if w.Through != bad.First-1 {
		t.Errorf("window through %d, want %d (before the damage)", w.Through, bad.First-1)
	}
	plan = repository.PlanCompaction(w, p, now)
	for _, st := range plan.Steps {
		for _, src := range st.Sources {
			if src.Last >= bad.First {
				t.Fatalf("the next plan takes %s again", src.Object.Key)
			}
		}
		if _, err := b.Compact(ctx, st, p, enc, nil); err != nil {
			t.Fatalf("compacting what is sound: %v", err)
		}
	}
	if len(plan.Steps) != 1 {
		t.Errorf("the next plan: %d steps, want the sound part compacted", len(plan.Steps))
	}
}
