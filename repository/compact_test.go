package repository_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestPlanCompaction plans from names and store times alone: closed
// buckets of the highest level first, never the writer's head, never a
// run of one, and every bucket of a sealed window.
func TestPlanCompaction(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	seg := func(first, last int64, level int, at time.Time) repository.SegmentInfo {
		si := repository.SegmentInfo{Generation: "g", First: first, Last: last, Level: level, Object: uploader.ObjectInfo{Key: "k" + at.Format("150405.000"), ModTime: at}}
		if level > 0 {
			si.Bucket = at
		}
		return si
	}
	// One segment per 10 s, 10:00:00 to 10:06:50 (42), revisions 2…43.
	var segs []repository.SegmentInfo
	for i := range 42 {
		segs = append(segs, seg(int64(i+2), int64(i+2), 0, t0.Add(time.Duration(i)*10*time.Second)))
	}
	anchor := &repository.Manifest{ID: "g", Revision: 1}
	p := repository.CompactPolicy{Levels: []time.Duration{30 * time.Second, 5 * time.Minute}, Settle: time.Second}
	type step struct {
		Level       int
		Bucket      string
		First, Last int64
	}
	steps := func(pl repository.CompactPlan) []step {
		var out []step
		for _, s := range pl.Steps {
			out = append(out, step{s.Level, s.Bucket.Format("15:04:05"), s.Sources[0].First, s.Sources[len(s.Sources)-1].Last})
		}
		return out
	}
	tests := []struct {
		name   string
		segs   []repository.SegmentInfo
		sealed bool
		now    time.Time
		want   []step
	}{
		{"nothing closed yet", segs[:3], false, t0.Add(30 * time.Second), nil},
		{"the head's bucket stays", segs[:3], false, t0.Add(time.Hour), nil},
		{"closed 30s buckets", segs[:7], false, t0.Add(61 * time.Second), []step{{1, "10:00:00", 2, 4}, {1, "10:00:30", 5, 7}}},
		{"settle not past", segs[:7], false, t0.Add(60 * time.Second), []step{{1, "10:00:00", 2, 4}}},
		{"a closed 5m bucket takes its 30s buckets", segs, false, t0.Add(7 * time.Minute),
			[]step{{2, "10:00:00", 2, 31}, {1, "10:05:00", 32, 34}, {1, "10:05:30", 35, 37}, {1, "10:06:00", 38, 40}}},
		{"sealed: every bucket", segs[:5], true, t0.Add(time.Hour), []step{{2, "10:00:00", 2, 6}}},
		{"a run of one is left", []repository.SegmentInfo{segs[0], segs[3], segs[6]}, false, t0.Add(time.Hour), nil},
		{"compacted segments merge at the next level", []repository.SegmentInfo{seg(2, 4, 1, t0), seg(5, 7, 1, t0.Add(30*time.Second)), segs[30]}, false, t0.Add(time.Hour),
			[]step{{2, "10:00:00", 2, 7}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := repository.Window{Generation: "g", Anchor: anchor, From: 1, Segments: tt.segs, Sealed: tt.sealed}
			if d := cmp.Diff(tt.want, steps(repository.PlanCompaction(w, p, tt.now))); d != "" {
				t.Errorf("steps (-want +got):\n%s", d)
			}
		})
	}
}

// TestCompact compacts a real chain in a directory store, step by step
// as a killed compactor would leave it: after the compacted segment is
// stored the window is the same revisions, read through it, the replaced
// segments Superseded and kept until the grace ends; a second run of the
// same step adopts what the first stored; verify --changes is clean at
// every point; after DeleteReplaced only the compacted segment is left,
// and a restore plan reads it instead of the nine it replaced.
func TestCompact(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := dirBackups(t, dir)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	var ranges [][2]int64
	for i := range int64(10) {
		ranges = append(ranges, [2]int64{s + 1 + 2*i, s + 2 + 2*i})
	}
	lastKey, lastHash := putChain(t, b, m.ID, s, ranges)
	// Store times: one segment every 10 s from t0.
	ws := windows(t, b)
	for i, si := range ws[0].Segments {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		if err := os.Chtimes(filepath.Join(dir, "store", si.Object.Key), at, at); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.PutProgress(ctx, &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a", SnapshotID: m.ID,
		SnapshotRevision: s, Through: s + 20, At: t0.Add(2 * time.Minute), LastSegment: lastKey, LastHash: lastHash, Token: 1}); err != nil {
		t.Fatal(err)
	}
	before := windows(t, b)[0]
	p := repository.CompactPolicy{Levels: []time.Duration{time.Minute}, Settle: time.Second, Grace: time.Minute}
	plan := repository.PlanCompaction(before, p, t0.Add(2*time.Minute))
	if len(plan.Steps) != 1 || len(plan.Steps[0].Sources) != 6 {
		t.Fatalf("plan: %+v, want one step of the first minute's 6 segments", plan.Steps)
	}
	enc := repository.Encoding{Compression: "zstd"}
	out, err := b.Compact(ctx, plan.Steps[0], p, enc, nil)
	if err != nil || len(out) != 1 || out[0].First != s+1 || out[0].Last != s+12 || out[0].Level != 1 {
		t.Fatalf("Compact: %+v, %v; want one level-1 segment %d-%d", out, err, s+1, s+12)
	}
	check := func(when string, segments, superseded int) repository.Window {
		t.Helper()
		w := windows(t, b)[0]
		if w.Problem != "" || w.Through != s+20 || len(w.Segments) != segments || len(w.Superseded) != superseded {
			t.Fatalf("%s: window %d-%d, %d segments, %d superseded, problem %q; want through %d, %d and %d",
				when, w.From, w.Through, len(w.Segments), len(w.Superseded), w.Problem, s+20, segments, superseded)
		}
		c, err := b.VerifyChanges(ctx, w, nil)
		if err != nil || c.Problem != nil || c.Through != s+20 {
			t.Fatalf("%s: verify --changes: through %d, %v, %v", when, c.Through, c.Problem, err)
		}
		return w
	}
	w := check("compacted, replaced kept", 5, 6)
	// Killed before its sources went: the same step again adopts it.
	again, err := b.Compact(ctx, plan.Steps[0], p, enc, nil)
	if err != nil || len(again) != 1 || again[0].Object.Key != out[0].Object.Key {
		t.Fatalf("Compact again: %+v, %v; want the stored one adopted", again, err)
	}
	// Within the grace the replaced segments stay; after it they go.
	if pl := repository.PlanCompaction(w, p, out[0].Object.ModTime.Add(2*time.Minute)); len(pl.Replaced[out[0].Object.Key]) != 6 {
		t.Fatalf("replaced after the grace: %+v, want the 6 sources", pl.Replaced)
	}
	if pl := repository.PlanCompaction(w, p, out[0].Object.ModTime.Add(30*time.Second)); len(pl.Replaced) != 0 {
		t.Fatalf("replaced within the grace: %+v, want none", pl.Replaced)
	}
	// A different compacted segment at that name is a conflict, never adopted.
	other := plan.Steps[0]
	other.Sources = other.Sources[:len(other.Sources)-1]
	bad := b.CompactedKey(m.ID, s+1, s+10, 1, other.Bucket, enc)
	if err := os.WriteFile(filepath.Join(dir, "store", bad), []byte("not a segment"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Compact(ctx, other, p, enc, nil); !errors.Is(err, repository.ErrBadSegment) {
		t.Fatalf("Compact over a damaged object at its name: %v, want ErrBadSegment", err)
	}
	check("a damaged object at a compacted name", 5, 7)
	w = windows(t, b)[0]
	n, err := b.DeleteReplaced(ctx, w.Segments[0], w.Superseded, nil)
	if err != nil || n != 7 {
		t.Fatalf("DeleteReplaced: %d, %v; want 7", n, err)
	}
	check("replaced deleted", 5, 0)

}

func windows(t *testing.T, b *repository.Repo) []repository.Window {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// alteringStore stores compacted segments with one byte flipped (a
// store that keeps other bytes than it was given), and can hide them
// from Stat (another writer storing the name between Stat and Put).
type alteringStore struct {
	uploader.Store
	flip, hide bool
}

func (s *alteringStore) Put(ctx context.Context, key string, r io.Reader, o uploader.PutOptions) (uploader.ObjectInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return uploader.ObjectInfo{}, err
	}
	if s.flip && strings.Contains(key, ".L1-") {
		data[len(data)/2] ^= 0xff
	}
	return s.Store.Put(ctx, key, bytes.NewReader(data), o)
}

func (s *alteringStore) Stat(ctx context.Context, key string) (uploader.ObjectInfo, error) {
	if s.hide && strings.Contains(key, ".L1-") {
		return uploader.ObjectInfo{}, fmt.Errorf("stat %s: %w", key, uploader.ErrNotFound)
	}
	return s.Store.Stat(ctx, key)
}

// TestCompactReadBack: the compacted segment is read back before it
// counts: stored bytes other than those encoded are proven damage naming
// it (not a compacted segment to build on), and one that appears at its
// name between the check and the put is not adopted unchecked; the
// next step adopts it only after comparing it with its sources.
func TestCompactReadBack(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := dirBackups(t, dir)
	st := &alteringStore{Store: b.Store, flip: true}
	b.Store = st
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	putChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 2}, {s + 3, s + 4}, {s + 5, s + 6}})
	w := windows(t, b)[0]
	step := repository.CompactStep{Generation: m.ID, Level: 1, Bucket: t0, Sources: w.Segments[:2]}
	p := repository.CompactPolicy{Levels: []time.Duration{time.Minute}}
	enc := repository.Encoding{Compression: "zstd"}
	_, err := b.Compact(ctx, step, p, enc, nil)
	de := repository.AsDamage(err)
	if !errors.Is(err, repository.ErrBadSegment) || de == nil || !strings.Contains(de.Key, ".L1-") {
		t.Fatalf("Compact onto a store that alters it: %v, want ErrBadSegment naming the compacted segment", err)
	}
	// The altered object stays (evidence); stored again unaltered under
	// another writer's hand, it is found at Put, not adopted blind.
	key := b.CompactedKey(m.ID, s+1, s+4, 1, t0, enc)
	if err := b.Store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	st.flip = false
	if _, err := b.Compact(ctx, step, p, enc, nil); err != nil {
		t.Fatalf("Compact: %v", err)
	}
	st.hide = true
	if _, err := b.Compact(ctx, step, p, enc, nil); !errors.Is(err, uploader.ErrExists) {
		t.Fatalf("Compact with its name stored meanwhile: %v, want ErrExists (the next pass checks it)", err)
	}
	st.hide = false
	out, err := b.Compact(ctx, step, p, enc, nil)
	if err != nil || len(out) != 1 || out[0].Object.Key != key {
		t.Fatalf("Compact again: %+v, %v; want %s adopted", out, err, key)
	}
}
