package repository_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// afterFirstList is a real store that runs hook once, right after its
// first listing: a writer acting between a reader's listings.
type afterFirstList struct {
	uploader.Store
	once sync.Once
	hook func()
}

func (s *afterFirstList) List(ctx context.Context, prefix string, fn func(uploader.ObjectInfo) error) error {
	err := s.Store.List(ctx, prefix, fn)
	s.once.Do(s.hook)
	return err
}

// TestWindowsWhileCaptureWrites: a capture that stores a segment and its
// marker, and deletes the marker they supersede, between the listings
// of a reader (lifeboat list, verify --changes, a resuming capture)
// leaves a sound window. Segments listed before markers made the new
// marker vouch for a segment the reader had not listed ("marker vouches
// for … but segments stop at …"), and verify read the deleted marker.
func TestWindowsWhileCaptureWrites(t *testing.T) {
	ctx := t.Context()
	b := dirBackups(t, t.TempDir())
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	key, hash := putChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 3}})
	marker := func(through int64, key, hash string, at time.Time) string {
		t.Helper()
		k, err := b.PutProgress(ctx, &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a",
			SnapshotID: m.ID, SnapshotRevision: s, Through: through, At: at, LastSegment: key, LastHash: hash, Token: 1})
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	old := marker(s+3, key, hash, t0.Add(time.Minute))

	live := &afterFirstList{Store: b.Store}
	live.hook = func() {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
			First: s + 4, Last: s + 4, CapturedThrough: s + 4, CapturedAt: t0.Add(2 * time.Minute), Token: 1, PrevHash: hash}
		seg := &repository.Segment{SegmentHeader: h, Revisions: []repository.Revision{{Revision: s + 4, Received: h.CapturedAt,
			Ops: []repository.Op{{Key: []byte("/k"), Value: []byte("v2"), CreateRevision: s + 1, Version: 4}}}}}
		o, h2, err := b.PutSegment(ctx, seg, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Error(err)
			return
		}
		marker(s+4, o.Key, h2, h.CapturedAt)
		if err := b.Store.Delete(ctx, old); err != nil {
			t.Error(err)
		}
	}
	r := repository.New(live, "test")
	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := r.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 || ws[0].Problem != "" || ws[0].Through < s+3 {
		t.Fatalf("windows while capture writes: %+v, want one sound window", ws)
	}
	c, err := r.VerifyChanges(ctx, ws[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Problem != nil {
		t.Errorf("verify --changes while capture writes: %v (at %s), want none: a marker deleted since the listing is no problem", c.Problem, c.ProblemKey)
	}
}
