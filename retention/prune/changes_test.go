package prune

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// putGeneration stores a chain of n one-revision segments after the
// snapshot (gen, snapRev), the last received at end, and a progress
// marker at each of ats (through the last revision). It returns the keys.
func putGeneration(t *testing.T, b *repository.Repo, gen string, snapRev int64, n int, end time.Time, ats ...time.Time) (segs, markers []string) {
	t.Helper()
	prev, last := "", ""
	for i := range n {
		rev := snapRev + 1 + int64(i)
		recv := end.Add(time.Duration(i-n+1) * time.Minute)
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: gen,
			First: rev, Last: rev, CapturedThrough: rev, CapturedAt: recv, Token: 1, PrevHash: prev}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = gen, snapRev
		}
		s := &repository.Segment{SegmentHeader: h, Revisions: []repository.Revision{{Revision: rev, Received: recv,
			Ops: []repository.Op{{Key: []byte("/registry/pods/shop/web"), Value: []byte("v"), CreateRevision: snapRev + 1, Version: int64(i + 1)}}}}}
		o, hash, err := b.PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatalf("PutSegment %s %d: %v", gen, rev, err)
		}
		prev, last = hash, o.Key
		segs = append(segs, o.Key)
	}
	for _, at := range ats {
		k, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: gen, ClusterID: "2a",
			SnapshotID: gen, SnapshotRevision: snapRev, Through: snapRev + int64(n), At: at, LastSegment: last, LastHash: prev, Token: 1})
		if err != nil {
			t.Fatal(err)
		}
		markers = append(markers, k)
	}
	return segs, markers
}

func exists(t *testing.T, b *repository.Repo, key string) bool {
	t.Helper()
	all := map[string]bool{}
	if err := b.Store.List(t.Context(), b.Cluster+"/", func(o uploader.ObjectInfo) error { all[o.Key] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	return all[key]
}

// TestPruneChanges: with changes-within 7d, a generation whose window
// ended 10 days ago goes whole (markers, segments), and then its anchor;
// a generation that ends 2 days ago stays with its anchor (reason
// "anchor"), losing only its superseded markers; the objects of a
// generation without a committed anchor are orphans past the grace and
// kept inside it; a held segment keeps its generation and anchor; a
// dry run changes nothing; a second run deletes nothing more.
func TestPruneChanges(t *testing.T) {
	day := 24 * time.Hour
	for _, ts := range testStores(t) {
		t.Run(ts.name, func(t *testing.T) {
			// Objects are stored at the real time; now is a month later,
			// so that the store's times are past the grace.
			now := time.Now().UTC().Add(30 * day).Truncate(time.Second)
			b := &repository.Repo{Store: ts.open(t), Cluster: jobtest.Cluster}
			old := jobtest.PutBackup(t, b, now.Add(-11*day), uploader.PutOptions{}, true)
			recent := jobtest.PutBackup(t, b, now.Add(-3*day), uploader.PutOptions{}, true)
			newest := jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, true)
			uncommitted := jobtest.PutObject(t, b, now.Add(-20*day), uploader.PutOptions{})
			young := jobtest.PutObject(t, b, now.Add(-time.Hour), uploader.PutOptions{})

			oldSegs, oldMarkers := putGeneration(t, b, old.ID, old.Revision, 3, now.Add(-10*day), now.Add(-10*day))
			end := now.Add(-2 * day)
			recentSegs, recentMarkers := putGeneration(t, b, recent.ID, recent.Revision, 2, end, end.Add(-2*time.Hour), end.Add(-time.Hour), end)
			orphanSegs, orphanMarkers := putGeneration(t, b, uncommitted.ID, uncommitted.Revision, 2, now.Add(-19*day), now.Add(-19*day))
			youngSegs, _ := putGeneration(t, b, young.ID, young.Revision, 1, now.Add(-time.Minute), now.Add(-time.Minute))

			job := Job{Backups: b, Policy: retention.Policy{Last: 1, ChangesWithin: 7 * day}, OrphanGrace: 24 * time.Hour, Now: fixedClock(now)}

			t.Run("held", func(t *testing.T) {
				release := repository.Hold(oldSegs[1])
				defer release()
				job := job
				job.DryRun = true
				res, err := Run(t.Context(), job, nil)
				if err != nil {
					t.Fatal(err)
				}
				for _, pg := range res.Plan.Generations {
					if pg.Window.Generation == old.ID && (pg.Action != ActionSkip || !strings.Contains(pg.Problem, "held")) {
						t.Errorf("held generation: %s %q", pg.Action, pg.Problem)
					}
				}
				for _, pb := range res.Plan.Backups {
					if pb.Entry.Manifest.ID == old.ID && pb.Action != ActionSkip {
						t.Errorf("anchor of a held generation: %s, want skip", pb.Action)
					}
				}
			})

			job.DryRun = true
			res, err := Run(t.Context(), job, nil)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, pb := range res.Plan.Backups {
				got[pb.Entry.Manifest.ID] = string(pb.Action) + " " + strings.Join(pb.Decision.Reasons, ", ")
			}
			want := map[string]string{old.ID: "delete ", recent.ID: "keep anchor", newest.ID: "keep last, newest"}
			for id, w := range want {
				if got[id] != w {
					t.Errorf("backup %s: %q, want %q", id, got[id], w)
				}
			}
			var gens []string
			for _, pg := range res.Plan.Generations {
				gens = append(gens, pg.Window.Generation+" "+string(pg.Action)+" "+strings.Join(pg.Decision.Reasons, ", "))
			}
			if want := []string{old.ID + " delete ", recent.ID + " keep changes within 7d, newest generation"}; !slices.Equal(gens, want) {
				t.Errorf("generations %q, want %q", gens, want)
			}
			if got, want := keysOf(res.Plan.Markers), recentMarkers[:2]; !slices.Equal(got, want) {
				t.Errorf("superseded markers %v, want %v", got, want)
			}
			orphans := keysOf(res.Plan.Orphans)
			for _, k := range append(orphanSegs, orphanMarkers...) {
				if !slices.Contains(orphans, k) {
					t.Errorf("%s of a generation without an anchor is not an orphan: %v", k, orphans)
				}
			}
			kept := map[string]string{}
			for _, k := range res.Plan.OrphansKept {
				kept[k.Object.Key] = k.Reason
			}
			if r := kept[youngSegs[0]]; !strings.Contains(r, "grace") {
				t.Errorf("segment of a young generation without an anchor: kept %q", r)
			}
			for _, k := range append(oldSegs, oldMarkers...) {
				if !exists(t, b, k) {
					t.Fatalf("dry run deleted %s", k)
				}
			}

			job.DryRun = false
			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Generations, []string{old.ID}) || !slices.Equal(res.Deleted, []string{old.ID}) || res.MarkersRemoved != 2 {
				t.Errorf("deleted generations %v backups %v markers %d", res.Generations, res.Deleted, res.MarkersRemoved)
			}
			for _, k := range slices.Concat(oldSegs, oldMarkers, orphanSegs, orphanMarkers, recentMarkers[:2], []string{b.ManifestKey(old.ID)}) {
				if exists(t, b, k) {
					t.Errorf("%s still there", k)
				}
			}
			for _, k := range slices.Concat(recentSegs, recentMarkers[2:], youngSegs, []string{b.ManifestKey(recent.ID)}) {
				if !exists(t, b, k) {
					t.Errorf("%s deleted", k)
				}
			}
			l, err := b.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ws, err := b.Windows(t.Context(), l)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range ws {
				if w.Generation == recent.ID && (w.Problem != "" || w.Through != recent.Revision+2 || !w.ThroughTime.Equal(end)) {
					t.Errorf("retained window changed: %+v", w)
				}
			}

			res, err = Run(t.Context(), job, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Deleted)+len(res.Generations)+res.MarkersRemoved+res.OrphansRemoved != 0 {
				t.Errorf("second run deleted %v %v %d %d", res.Deleted, res.Generations, res.MarkersRemoved, res.OrphansRemoved)
			}
		})
	}
}

// holdingStore holds key `then` when key `when` is deleted: a restore
// that starts reading between prune's plan and its deletes.
type holdingStore struct {
	uploader.Store
	when, then string
	release    func()
}

func (s *holdingStore) Delete(ctx context.Context, key string) error {
	if key == s.when && s.release == nil {
		s.release = repository.Hold(s.then)
	}
	return s.Store.Delete(ctx, key)
}

// TestPruneChangesFollowAnchors: with changes-within 0 a generation
// lives as long as its anchor: the one whose anchor the snapshot rules
// delete goes (segments first, then the anchor); the newest generation
// stays, and so does its anchor. A key held after the plan (a restore
// that started meanwhile) stops the generation's delete there, and its
// anchor stays.
func TestPruneChangesFollowAnchors(t *testing.T) {
	day := 24 * time.Hour
	now := time.Now().UTC().Add(30 * day).Truncate(time.Second)
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted", true: "held meanwhile"}[held], func(t *testing.T) {
			d, err := uploader.NewDir(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			hs := &holdingStore{Store: d}
			b := &repository.Repo{Store: hs, Cluster: jobtest.Cluster}
			a := jobtest.PutBackup(t, b, now.Add(-5*day), uploader.PutOptions{}, true)
			c := jobtest.PutBackup(t, b, now.Add(-4*day), uploader.PutOptions{}, true)
			jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, true)
			aSegs, aMarkers := putGeneration(t, b, a.ID, a.Revision, 3, now.Add(-5*day+time.Hour), now.Add(-5*day+time.Hour))
			cSegs, _ := putGeneration(t, b, c.ID, c.Revision, 1, now.Add(-4*day+time.Hour), now.Add(-4*day+time.Hour))
			if held {
				// Markers go first, then segments from the newest down.
				hs.when, hs.then = aMarkers[0], aSegs[0]
				defer func() {
					if hs.release != nil {
						hs.release()
					}
				}()
			}
			res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: 24 * time.Hour, Now: fixedClock(now)}, nil)
			if held {
				if err != nil {
					t.Fatalf("held meanwhile is no error (the next run retries): %v", err)
				}
				if len(res.Deleted) != 0 || len(res.Generations) != 0 || !exists(t, b, b.ManifestKey(a.ID)) || !exists(t, b, aSegs[0]) {
					t.Errorf("held: deleted %v generations %v", res.Deleted, res.Generations)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(res.Generations, []string{a.ID}) || !slices.Equal(res.Deleted, []string{a.ID}) {
				t.Errorf("deleted generations %v backups %v, want %s", res.Generations, res.Deleted, a.ID)
			}
			for _, pb := range res.Plan.Backups {
				if pb.Entry.Manifest.ID == c.ID && (pb.Action != ActionKeep || !slices.Contains(pb.Decision.Reasons, "anchor")) {
					t.Errorf("anchor of the newest generation: %s %v", pb.Action, pb.Decision.Reasons)
				}
			}
			for _, k := range append(aSegs, aMarkers...) {
				if exists(t, b, k) {
					t.Errorf("%s still there", k)
				}
			}
			if !exists(t, b, cSegs[0]) || !exists(t, b, b.ManifestKey(c.ID)) {
				t.Error("newest generation or its anchor deleted")
			}
		})
	}
}
