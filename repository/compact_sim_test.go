package repository_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// simulate runs capture's writer and compactor on names alone: one
// segment per interval for d, a compaction pass every pass, each step
// applied as Compact would store it and each replaced segment deleted
// after the grace. It calls probe after every pass with the window and
// the objects stored.
func simulate(t *testing.T, p repository.CompactPolicy, interval, pass, d time.Duration, probe func(now time.Time, w repository.Window, stored int)) {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 0, 0, 17, 0, time.UTC) // not on a bucket boundary
	w := repository.Window{Generation: "g", Anchor: &repository.Manifest{ID: "g", Revision: 1}, From: 1, Through: 1}
	key := func(si repository.SegmentInfo) string {
		return fmt.Sprintf("%d-%d.L%d", si.First, si.Last, si.Level)
	}
	nextPass := t0.Add(pass)
	for now := t0; now.Before(t0.Add(d)); now = now.Add(interval) {
		si := repository.SegmentInfo{Generation: "g", First: w.Through + 1, Last: w.Through + 1}
		si.Object = uploader.ObjectInfo{Key: key(si), ModTime: now}
		w.Segments = append(w.Segments, si)
		w.Through = si.Last
		if now.Before(nextPass) {
			continue
		}
		nextPass = nextPass.Add(pass)
		plan := repository.PlanCompaction(w, p, now)
		for _, st := range plan.Steps {
			c := repository.SegmentInfo{Generation: "g", First: st.Sources[0].First, Last: st.Sources[len(st.Sources)-1].Last, Level: st.Level, Bucket: st.Bucket}
			c.Object = uploader.ObjectInfo{Key: key(c), ModTime: now}
			i := slices.IndexFunc(w.Segments, func(s repository.SegmentInfo) bool { return s.First == c.First })
			j := i + len(st.Sources)
			w.Superseded = append(w.Superseded, w.Segments[i:j]...)
			w.Segments = slices.Concat(w.Segments[:i], []repository.SegmentInfo{c}, w.Segments[j:])
		}
		for _, gone := range plan.Replaced {
			w.Superseded = slices.DeleteFunc(w.Superseded, func(s repository.SegmentInfo) bool { return slices.Contains(gone, s) })
		}
		probe(now, w, len(w.Segments)+len(w.Superseded))
	}
}

// TestCompactionBoundsObjects: at capture's default 1 s interval and the
// default levels (30 s, 5 min, 1 h), a restore to any point of a
// generation reads at most 60 change objects however long it runs (the
// issue's target: 1 snapshot + 60), and the objects stored level off: a
// day is about as many as its hours, not 86 400.
func TestCompactionBoundsObjects(t *testing.T) {
	if testing.Short() {
		t.Skip("simulates a day of segments")
	}
	p := repository.CompactPolicy{Levels: repository.DefaultCompactLevels}
	maxPath, maxStored := 0, 0
	var atHour []int
	simulate(t, p, time.Second, 10*time.Second, 25*time.Hour, func(now time.Time, w repository.Window, stored int) {
		// Within one hour of the generation's start a restore reads the
		// path; later ones start from a later snapshot, but the whole
		// path of the first hour bounds them all.
		n := 0
		for _, s := range w.Segments {
			if s.Last-w.From <= 3600 {
				n++
			}
		}
		maxPath, maxStored = max(maxPath, n), max(maxStored, stored)
		if now.Second() == 17 && now.Minute() == 0 {
			atHour = append(atHour, len(w.Segments))
		}
	})
	t.Logf("1 s interval, levels %v: a restore within the first hour reads at most %d change objects; at most %d objects stored at once; path length hourly: %v", p.Levels, maxPath, maxStored, atHour)
	if maxPath > 60 {
		t.Errorf("a restore within an hour of the snapshot reads up to %d change objects, want at most 60", maxPath)
	}
	// 25 hours: 25 closed hours at most, plus the current hour's levels
	// and the replaced segments within the grace.
	if last := atHour[len(atHour)-1]; last > 25+12+10+30 {
		t.Errorf("after a day the window is %d objects, want at most %d", last, 25+12+10+30)
	}
	// Stored at once: the window, and what was replaced within the
	// grace (10 minutes of 1 s segments, and the few compacted ones).
	if bound := 25 + 12 + 10 + 30 + int(p.WithDefaults().Grace/time.Second) + 40; maxStored > bound {
		t.Errorf("up to %d objects stored at once, want them to level off at most at %d", maxStored, bound)
	}
}
