package replica_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// chain extends generation m in b by n segments of 2 revisions each after
// revision *next, linked to *prev, then stores a marker through the last.
func chain(t *testing.T, b *repository.Repo, m *repository.Manifest, n int, next *int64, prev *string) {
	t.Helper()
	var key string
	for range n {
		var revs []repository.Revision
		for range 2 {
			r := *next
			revs = append(revs, repository.Revision{Revision: r, Received: t0.Add(time.Duration(r-m.Revision) * time.Second),
				Ops: []repository.Op{{Key: []byte(fmt.Sprintf("/k/%d", r%3)), Value: []byte(fmt.Sprint(r)), CreateRevision: m.Revision + 1, Version: r - m.Revision}}})
			*next++
		}
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID, First: revs[0].Revision, Last: revs[1].Revision,
			CapturedThrough: revs[1].Revision, CapturedAt: revs[1].Received, Token: 1, PrevHash: *prev}
		if *prev == "" {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		o, hash, err := b.PutSegment(t.Context(), &repository.Segment{SegmentHeader: h, Revisions: revs}, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatal(err)
		}
		*prev, key = hash, o.Key
	}
	last := *next - 1
	if _, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a",
		SnapshotID: m.ID, SnapshotRevision: m.Revision, Through: last, At: t0.Add(time.Duration(last-m.Revision+1) * time.Second),
		LastSegment: key, LastHash: *prev, Token: 1}); err != nil {
		t.Fatal(err)
	}
}

func window(t *testing.T, b *repository.Repo, gen string) repository.Window {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.Generation == gen {
			return w
		}
	}
	t.Fatalf("no window of %s in %s", gen, b.Store)
	return repository.Window{}
}

// TestCopyChangesAcrossCompaction: a copy holds the primary's window
// (segments in chain order, markers after them) and keeps holding it
// whole after the primary compacts and deletes what it replaced: a copy
// that already had the revisions keeps its own segments, a fresh copy
// takes the compacted one; both verify (the chain and the markers).
func TestCopyChangesAcrossCompaction(t *testing.T) {
	primary, early := dirRepo(t), dirRepo(t)
	m := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	next, prev := m.Revision+1, ""
	chain(t, primary, m, 6, &next, &prev)
	lg, _ := jobtest.Logger(t)
	check := func(t *testing.T, b *repository.Repo) repository.Window {
		t.Helper()
		want := window(t, primary, m.ID)
		w := window(t, b, m.ID)
		if w.Through != want.Through || !w.ThroughTime.Equal(want.ThroughTime) || w.Problem != "" {
			t.Errorf("%s window %s (%s), the primary's %s", b.Store, w.String(), w.Problem, want.String())
		}
		c, err := b.VerifyChanges(t.Context(), w, nil)
		if err != nil || c.Problem != nil {
			t.Errorf("verify the changes in %s: %v %v", b.Store, err, c.Problem)
		}
		return w
	}
	res, err := replica.Run(t.Context(), replica.Job{Name: "early", From: primary, To: early}, lg)
	if err != nil {
		t.Fatal(err)
	}
	if res.ChangesPoint.Before(res.RecoveryPoint) || res.ChangesPoint.Equal(res.RecoveryPoint) {
		t.Errorf("changes point %s, recovery point %s: the window adds nothing?", res.ChangesPoint, res.RecoveryPoint)
	}
	check(t, early)

	// The primary's first segments age (compaction files level-0
	// segments by their store time), it grows, compacts and deletes what
	// it replaced.
	for _, si := range window(t, primary, m.ID).Segments {
		p := filepath.Join(primary.Store.(*uploader.Dir).Root(), filepath.FromSlash(si.Object.Key))
		old := time.Now().Add(-2 * time.Hour)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	chain(t, primary, m, 2, &next, &prev)
	pol := repository.CompactPolicy{Levels: []time.Duration{time.Minute}, Grace: time.Second}
	plan := repository.PlanCompaction(window(t, primary, m.ID), pol, time.Now().Add(time.Hour))
	if len(plan.Steps) == 0 {
		t.Fatal("nothing to compact")
	}
	for _, st := range plan.Steps {
		out, err := primary.Compact(t.Context(), st, pol, repository.Encoding{Compression: "zstd"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, by := range out {
			if _, err := primary.DeleteReplaced(t.Context(), by, st.Sources, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	if w := window(t, primary, m.ID); len(w.Segments) >= 8 {
		t.Fatalf("the primary did not compact: %d segments", len(w.Segments))
	}

	t.Run("a copy that had the revisions", func(t *testing.T) {
		if _, err := replica.Run(t.Context(), replica.Job{Name: "early", From: primary, To: early}, lg); err != nil {
			t.Fatal(err)
		}
		if w := check(t, early); len(w.Segments) != 8 {
			t.Errorf("the copy's window has %d segments, want its 6 and the 2 new", len(w.Segments))
		}
	})
	t.Run("a fresh copy", func(t *testing.T) {
		fresh := dirRepo(t)
		if _, err := replica.Run(t.Context(), replica.Job{Name: "fresh", From: primary, To: fresh}, lg); err != nil {
			t.Fatal(err)
		}
		if w, pw := check(t, fresh), window(t, primary, m.ID); len(w.Segments) != len(pw.Segments) {
			t.Errorf("the fresh copy's window has %d segments, the primary's %d", len(w.Segments), len(pw.Segments))
		}
	})
}
