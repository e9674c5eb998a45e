package fleet

import (
	"path/filepath"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestHubPointInTimeDrill: a cluster whose agent captures (a generation
// of a real etcd captured into versitygw, with a scheduled backup taken
// during it) and one without capture, in one bucket. The hub drills both:
// the captured cluster gets its newest-backup drill and a point-in-time
// drill that replays the window from the anchor to the later backup's
// revision and compares HashKV with that backup's, stored as the
// cluster's drill report of the anchor with its point-in-time section;
// the other cluster gets one drill. Then one segment between the two
// backups has a flipped byte: the point-in-time drill FAILS (a verdict),
// the newest-backup drills of both clusters still pass.
func TestHubPointInTimeDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	fs := newFleetStores(t)
	s := restoretest.StartPITRSource(t, 60, repository.New(fs.s3, "pitr"))
	s.Capture.Stop()
	snap(t, s.C, fs.s3, "plain")
	src := []Source{{Name: "bucket", Store: fs.s3}}
	ids := func(cluster string) ([]age.Identity, error) {
		if cluster == "pitr" {
			return s.IDs, nil
		}
		return nil, nil
	}
	lg, _ := jobtest.Logger(t)
	scratch := t.TempDir()
	newDrills := func() *Drills {
		d, err := NewDrills(DrillConfig{Schedule: "@daily", Concurrency: 2, ScratchDir: scratch, Version: "test", Identities: ids}, DefaultPolicy(), lg)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	cs, err := Read(t.Context(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep := NewReport(cs, DefaultPolicy(), now)
	d := newDrills()
	due := d.Due(rep, now)
	if len(due) != 2 {
		t.Fatalf("%d clusters due, want 2", len(due))
	}
	results := d.Run(t.Context(), src, due)
	byKind := map[[2]any]DrillResult{}
	for _, r := range results {
		byKind[[2]any{r.Cluster, r.PointInTime}] = r
		if r.Outcome == nil || !r.Outcome.Passed {
			t.Errorf("%s (point in time %v): outcome %+v, err %v; want passed", r.Cluster, r.PointInTime, r.Outcome, r.Err)
		}
	}
	if len(results) != 3 || byKind[[2]any{"plain", true}].Cluster != "" {
		t.Fatalf("results %+v: want plain's drill, pitr's drill and pitr's point-in-time drill", results)
	}
	pr := byKind[[2]any{"pitr", true}]
	if pr.Outcome == nil || pr.Outcome.BackupID != s.Anchor.ID || pr.Outcome.TargetRevision != s.Later.Revision {
		t.Fatalf("point-in-time drill %+v: want from the anchor %s to the later backup's revision %d", pr.Outcome, s.Anchor.ID, s.Later.Revision)
	}
	last, err := s.Repo.LastDrills(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ld := last[s.Anchor.ID]
	if ld == nil || ld.DrillReport == nil || ld.PointInTime == nil {
		t.Fatalf("the anchor's drill report %+v: want the hub's point-in-time drill", ld)
	}
	pt := ld.PointInTime
	if !ld.Passed || pt.TargetRevision != s.Later.Revision || pt.Revisions != s.Later.Revision-s.Anchor.Revision ||
		pt.LiveHashKV != s.Later.HashKV || pt.RestoredHashKV != pt.LiveHashKV || pt.LiveEndpoint != "backup "+s.Later.ID {
		t.Errorf("stored point-in-time report %+v (passed %v): want %d revisions replayed to %d, HashKV %08x of backup %s", pt, ld.Passed,
			s.Later.Revision-s.Anchor.Revision, s.Later.Revision, s.Later.HashKV, s.Later.ID)
	}
	if want := s.Live(t, s.Later.Revision); pt.RestoredHashKV != want.Hash {
		t.Errorf("restored HashKV %08x, the source's at %d %08x", pt.RestoredHashKV, s.Later.Revision, want.Hash)
	}
	for _, c := range []string{"pitr", "plain"} {
		restoretest.AssertEmpty(t, filepath.Join(scratch, c))
	}

	// A flipped byte in a segment the replay reads: a failed verdict of
	// the point-in-time drill alone.
	l, err := s.Repo.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p, err := restore.PlanPointInTime(t.Context(), s.Repo, l, restore.Target{Revision: s.Later.Revision}, s.IDs)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.StartFrom(s.Anchor); err != nil || len(p.Segments) == 0 {
		t.Fatalf("plan from the anchor: %v, %d segments", err, len(p.Segments))
	}
	flipByte(t, fs.s3, p.Segments[len(p.Segments)/2].Object.Key)
	for _, r := range newDrills().Run(t.Context(), src, due) {
		passed := r.Outcome != nil && r.Outcome.Passed
		switch {
		case r.PointInTime && (passed || r.Outcome == nil || r.Outcome.RunError):
			t.Errorf("point-in-time drill over a damaged segment: outcome %+v, err %v; want a failed verdict", r.Outcome, r.Err)
		case !r.PointInTime && !passed:
			t.Errorf("%s's drill of its newest backup: outcome %+v, err %v; want passed", r.Cluster, r.Outcome, r.Err)
		}
	}
}
