package replica_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
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
// that already had the revisions takes the compacted segment too and
// keeps its own small ones, superseded, for the grace; a fresh copy
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
		w, pw := check(t, early), window(t, primary, m.ID)
		if got, want := keys(w.Segments), keys(pw.Segments); !slices.Equal(got, want) || len(w.Superseded) != 6 {
			t.Errorf("the copy's window has %d segments and %d superseded, want the primary's %d and its own 6 superseded (within the grace): %s",
				len(w.Segments), len(w.Superseded), len(pw.Segments), firstDiff(got, want))
		}

		// Past the grace the small ones go, but only after the compacted
		// one that replaced them checks out in the copy: damaged, it is
		// written again and they stay until the next run.
		later := replica.Job{Name: "early", From: primary, To: early, Now: func() time.Time { return time.Now().Add(time.Hour) }}
		c := w.Segments[slices.IndexFunc(w.Segments, func(s repository.SegmentInfo) bool { return s.Level > 0 })]
		if err := early.Store.Delete(t.Context(), c.Object.Key); err != nil {
			t.Fatal(err)
		}
		if _, err := early.Store.Put(t.Context(), c.Object.Key, strings.NewReader("not the primary's"), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		res, err := replica.Run(t.Context(), later, lg)
		if err != nil {
			t.Fatal(err)
		}
		if w := check(t, early); res.Replaced != 1 || len(w.Superseded) != 6 {
			t.Errorf("with its compacted segment damaged the copy replaced %d objects and kept %d superseded, want 1 and all 6", res.Replaced, len(w.Superseded))
		}
		if res, err = replica.Run(t.Context(), later, lg); err != nil {
			t.Fatal(err)
		}
		if w := check(t, early); len(w.Superseded) != 0 || res.Removed < 6 {
			t.Errorf("past the grace the copy keeps %d superseded segments (removed %d objects), want none", len(w.Superseded), res.Removed)
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

// clock is a test's compressed time for store objects: every object
// found new under a directory store's root is dated now, as if it had
// been stored at now.
type clock struct {
	t    *testing.T
	now  time.Time
	seen map[string]bool
}

func (c *clock) stamp(b *repository.Repo) {
	c.t.Helper()
	err := filepath.WalkDir(b.Store.(*uploader.Dir).Root(), func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() || c.seen[p] {
			return err
		}
		c.seen[p] = true
		return os.Chtimes(p, c.now, c.now)
	})
	if err != nil {
		c.t.Fatal(err)
	}
}

// dropMarkers deletes generation gen's progress markers but the newest,
// as capture does once a newer one is stored.
func dropMarkers(t *testing.T, b *repository.Repo, gen string) {
	t.Helper()
	ms := window(t, b, gen).Markers
	for _, m := range ms[:max(0, len(ms)-1)] {
		if err := b.Store.Delete(t.Context(), m.Object.Key); err != nil {
			t.Fatal(err)
		}
	}
}

// compactPass is one pass of capture's compactor over b's window of gen
// at now: the plan's steps compacted, then what the plan says replaced
// segments whose replacement is past the grace deleted.
func compactPass(t *testing.T, b *repository.Repo, gen string, pol repository.CompactPolicy, c *clock) {
	t.Helper()
	w := window(t, b, gen)
	plan := repository.PlanCompaction(w, pol, c.now)
	for _, st := range plan.Steps {
		if _, err := b.Compact(t.Context(), st, pol, repository.Encoding{Compression: "zstd"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	c.stamp(b)
	for _, by := range w.Segments {
		if gone := plan.Replaced[by.Object.Key]; len(gone) > 0 {
			if _, err := b.DeleteReplaced(t.Context(), by, gone, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func keys(segs []repository.SegmentInfo) []string {
	var out []string
	for _, s := range segs {
		out = append(out, s.Object.Key)
	}
	return out
}

// follower is one copy of TestCopyFollowsCompaction, run every every
// steps; listed are the paths its window had before its recent runs (a
// restore's listing), figures what it held at each period's end.
type follower struct {
	name    string
	every   int
	repo    *repository.Repo
	listed  []listing
	figures []string
}

type listing struct {
	at   time.Time
	keys []string
}

// TestCopyFollowsCompaction: over four compaction periods in compressed
// time (capture's one segment a second, levels of 10 s and 1 min, a
// grace of 15 s), a copy that takes the level-0 segments every 3 s,
// before they are compacted, and one that lags (every 20 s, longer than
// the grace: it takes compacted segments after the primary deleted what
// they replaced) follow the primary's path: after each copy the copy's
// window is the primary's path object for object, whole, with the
// primary's recovery point; a segment a restore from the copy listed
// stays for the grace after (the copy keeps the primary's promise); a
// superseded one stays only while the primary holds it or the copy's
// object that replaced it is within the grace, so the change objects
// level off at the primary's count instead of growing with every
// segment capture wrote. At the end both verify, and a point-in-time
// restore from each plans the primary's compacted objects.
func TestCopyFollowsCompaction(t *testing.T) {
	const (
		steps     = 4 * 60 // one level-0 segment each (a virtual second)
		passEvery = 5
	)
	pol := repository.CompactPolicy{Levels: []time.Duration{10 * time.Second, time.Minute}, Grace: 15 * time.Second}
	primary := dirRepo(t)
	copies := []*follower{{name: "often", every: 3, repo: dirRepo(t)}, {name: "late", every: 20, repo: dirRepo(t)}}
	c := &clock{t: t, now: time.Now().Add(-time.Hour).Truncate(time.Minute).Add(17 * time.Second), seen: map[string]bool{}}
	m := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	c.stamp(primary)
	lg, _ := jobtest.Logger(t)
	next, prev := m.Revision+1, ""
	var figures []string
	for step := 1; step <= steps; step++ {
		c.now = c.now.Add(time.Second)
		chain(t, primary, m, 1, &next, &prev)
		dropMarkers(t, primary, m.ID)
		c.stamp(primary)
		if step%passEvery == 0 {
			compactPass(t, primary, m.ID, pol, c)
		}
		for _, f := range copies {
			if step%f.every == 0 {
				f.copy(t, step, primary, m.ID, pol, c, lg)
			}
		}
		if step%60 == 0 {
			figures = append(figures, fmt.Sprintf("after %d s: primary %d", step, count(window(t, primary, m.ID))))
		}
	}
	t.Logf("%d level-0 segments written; change segments held %s; often (every %d s) %s; late (every %d s) %s", steps,
		strings.Join(figures, ", "), copies[0].every, strings.Join(copies[0].figures, ", "), copies[1].every, strings.Join(copies[1].figures, ", "))

	pw := window(t, primary, m.ID)
	want, err := restore.PlanPointInTime(t.Context(), primary, nil, restore.Target{Revision: pw.Through}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range copies {
		cw := window(t, f.repo, m.ID)
		if ch, err := f.repo.VerifyChanges(t.Context(), cw, nil); err != nil || ch.Problem != nil {
			t.Errorf("verify the changes in %s: %v %v", f.name, err, ch.Problem)
		}
		got, err := restore.PlanPointInTime(t.Context(), f.repo, nil, restore.Target{Revision: pw.Through}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(keys(got.Segments), keys(want.Segments)) || got.Snapshot.ID != m.ID {
			t.Errorf("a restore from %s replays %d objects from %s, from the primary %d from %s: %s", f.name,
				len(got.Segments), got.Snapshot.ID, len(want.Segments), want.Snapshot.ID, firstDiff(keys(got.Segments), keys(want.Segments)))
		}
		if len(got.Segments) == 0 || got.Segments[0].Level != len(pol.Levels) || len(got.Segments) > 20 {
			t.Errorf("a restore from %s replays %d objects: want a few, the compacted ones first", f.name, len(got.Segments))
		}
	}
}

func count(w repository.Window) int { return len(w.Segments) + len(w.Superseded) }

// copy runs f's copy at step and checks it (checkFollows, checkListed).
func (f *follower) copy(t *testing.T, step int, primary *repository.Repo, gen string, pol repository.CompactPolicy, c *clock, lg *slog.Logger) {
	t.Helper()
	if step > f.every {
		f.listed = append(f.listed, listing{at: c.now, keys: keys(window(t, f.repo, gen).Segments)})
	}
	res, err := replica.Run(t.Context(), replica.Job{Name: f.name, From: primary, To: f.repo, Grace: pol.Grace, Now: func() time.Time { return c.now }}, lg)
	if err != nil {
		t.Fatalf("%s at step %d: %v", f.name, step, err)
	}
	c.stamp(f.repo)
	pw, cw := window(t, primary, gen), window(t, f.repo, gen)
	if !t.Failed() { // the first step that fails says why; the figures go on
		// Beyond the primary's objects the copy holds at most what it
		// replaced within its grace and one copy interval: level-0
		// segments of that long, and a compacted one per level.
		keep := pol.Grace + time.Duration(f.every)*time.Second
		checkFollows(t, f.name, step, pw, cw, res, c.now, keep, int(keep/time.Second)+len(pol.Levels))
		f.listed = checkListed(t, f.name, step, f.listed, cw, c.now, pol.Grace)
	}
	if step%60 == 0 {
		f.figures = append(f.figures, fmt.Sprintf("%d (path %d)", count(cw), len(cw.Segments)))
	}
}

// checkListed checks that every segment a listing of the copy's path
// within the last grace named is still in the copy (cw), and returns
// the listings still within it.
func checkListed(t *testing.T, name string, step int, listed []listing, cw repository.Window, now time.Time, grace time.Duration) []listing {
	t.Helper()
	in := map[string]bool{}
	for _, k := range keys(slices.Concat(cw.Segments, cw.Superseded)) {
		in[k] = true
	}
	listed = slices.DeleteFunc(listed, func(l listing) bool { return !now.Before(l.at.Add(grace)) })
	for _, l := range listed {
		for _, k := range l.keys {
			if !in[k] {
				t.Errorf("%s at step %d: %s, on the copy's path %s ago, is gone within the grace of %s: a restore that listed it fails", name, step, path.Base(k), now.Sub(l.at), grace)
			}
		}
	}
	return listed
}

// checkFollows checks, after a copy at step, that the copy's window cw
// follows the primary's pw: the same revisions and recovery point, the
// same path object for object, superseded segments kept only while the
// primary holds them or their replacement in the copy is younger than
// grace, and so at most extra objects more than the primary.
func checkFollows(t *testing.T, name string, step int, pw, cw repository.Window, res *replica.Result, now time.Time, grace time.Duration, extra int) {
	t.Helper()
	if cw.Through != pw.Through || cw.Problem != "" || !res.ChangesPoint.Equal(pw.ThroughTime) {
		t.Errorf("%s at step %d: the copy's %s (%q, changes point %s), the primary's %s", name, step, cw.String(), cw.Problem, res.ChangesPoint, pw.String())
	}
	if got, want := keys(cw.Segments), keys(pw.Segments); !slices.Equal(got, want) {
		t.Errorf("%s at step %d: the copy's path is %d objects, the primary's %d: %s", name, step, len(got), len(want), firstDiff(got, want))
	}
	onPrimary := map[string]bool{}
	for _, k := range keys(slices.Concat(pw.Segments, pw.Superseded)) {
		onPrimary[k] = true
	}
	for _, s := range cw.Superseded {
		by := cw.Segments[slices.IndexFunc(cw.Segments, func(p repository.SegmentInfo) bool { return p.First <= s.First && s.Last <= p.Last })]
		if !onPrimary[s.Object.Key] && now.Sub(by.Object.ModTime) > grace {
			t.Errorf("%s at step %d: the copy still holds %s, gone from the primary, replaced in the copy by %s %s ago (kept %s at most)", name, step, s.Object.Key, by.Object.Key, now.Sub(by.Object.ModTime), grace)
		}
	}
	if bound := count(pw) + extra; count(cw) > bound {
		t.Errorf("%s at step %d: the copy holds %d change segments, the primary %d: want at most %d", name, step, count(cw), count(pw), bound)
	}
}

// firstDiff says where two lists of keys first differ.
func firstDiff(got, want []string) string {
	for i := range max(len(got), len(want)) {
		g, w := "(none)", "(none)"
		if i < len(got) {
			g = path.Base(got[i])
		}
		if i < len(want) {
			w = path.Base(want[i])
		}
		if g != w {
			return fmt.Sprintf("at %d the copy's %s, the primary's %s", i, g, w)
		}
	}
	return "the same"
}

// hooked is a real store that calls on once, before the first Put of a
// key match accepts: the moment a test changes the primary mid-run.
type hooked struct {
	uploader.Store
	match func(key string) bool
	on    func()
	once  sync.Once
}

func (h *hooked) Put(ctx context.Context, key string, r io.Reader, o uploader.PutOptions) (uploader.ObjectInfo, error) {
	if h.match(key) {
		h.once.Do(h.on)
	}
	return h.Store.Put(ctx, key, r, o)
}

// TestCopyChangesListedAgain: the primary compacts a window and deletes
// the segments it replaced while a copy run is under way (issue 28,
// section 4, defect 2): after the run listed the windows, while it
// copies the backups (backups that take longer than compaction_grace),
// or between two of the window's segments. Before, the run copied
// changes from its first listing and failed at "read segment ... not
// found", so with backups arriving steadily windows never reached the
// copy. Now it lists the primary again before the changes and again
// when a listed segment is gone: the copy's window is the primary's
// path, whole.
func TestCopyChangesListedAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		match func(key string) bool
	}{
		{"while the backups are copied", func(key string) bool {
			return strings.Contains(key, "/snapshots/") && strings.HasSuffix(key, ".json")
		}},
		{"while the changes are copied", func(key string) bool { return strings.Contains(key, "/changes/") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			primary := dirRepo(t)
			m := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
			next, prev := m.Revision+1, ""
			chain(t, primary, m, 6, &next, &prev)
			for _, si := range window(t, primary, m.ID).Segments {
				p := filepath.Join(primary.Store.(*uploader.Dir).Root(), filepath.FromSlash(si.Object.Key))
				old := time.Now().Add(-2 * time.Hour)
				if err := os.Chtimes(p, old, old); err != nil {
					t.Fatal(err)
				}
			}
			chain(t, primary, m, 2, &next, &prev)
			compacted := false
			compact := func() {
				pol := repository.CompactPolicy{Levels: []time.Duration{time.Minute}, Grace: time.Second}
				plan := repository.PlanCompaction(window(t, primary, m.ID), pol, time.Now().Add(time.Hour))
				for _, st := range plan.Steps {
					out, err := primary.Compact(t.Context(), st, pol, repository.Encoding{Compression: "zstd"}, nil)
					if err != nil {
						t.Error(err)
						return
					}
					for _, by := range out {
						if _, err := primary.DeleteReplaced(t.Context(), by, st.Sources, nil); err != nil {
							t.Error(err)
							return
						}
						compacted = true
					}
				}
			}
			copyStore, err := uploader.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			to := repository.New(&hooked{Store: copyStore, match: tc.match, on: compact}, jobtest.Cluster)
			lg, _ := jobtest.Logger(t)
			res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
			if err != nil {
				t.Fatalf("copy: %v", err)
			}
			if !compacted {
				t.Fatal("the primary did not compact during the run")
			}
			pw, cw := window(t, primary, m.ID), window(t, to, m.ID)
			if cw.Through != pw.Through || cw.Problem != "" || !res.ChangesPoint.Equal(pw.ThroughTime) {
				t.Errorf("the copy's %s (%q, changes point %s), the primary's %s", cw.String(), cw.Problem, res.ChangesPoint, pw.String())
			}
			if got, want := keys(cw.Segments), keys(pw.Segments); !slices.Equal(got, want) {
				t.Errorf("the copy's path is %d objects, the primary's %d: %s", len(got), len(want), firstDiff(got, want))
			}
			if c, err := to.VerifyChanges(t.Context(), cw, nil); err != nil || c.Problem != nil {
				t.Errorf("verify the copy's changes: %v %v", err, c.Problem)
			}
		})
	}
}
