package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestAgentCaptureDrill: the built `lifeboat agent --capture` with a drill
// schedule drills points in time: after the live cluster was compacted
// inside the window, its drills target a revision between the live
// compact revision and the captured-through revision, pass against the
// live cluster's HashKV, and store their reports beside the start
// snapshot with the point-in-time section.
func TestAgentCaptureDrill(t *testing.T) {
	r := newCaptureRig(t)
	ctx := t.Context()
	a := r.startAgent("a", r.etcd.Endpoints()[0], "--lock=false", "--drill-schedule", "@every 2s",
		"--scratch-dir", filepath.Join(r.dir, "scratch"))
	waitUntil(t, "a generation", time.Minute, func() bool { return a.capture().Running }, a)
	l := r.startLoad()
	compact := l.waitWritten(t, 0, 150)
	l.waitWritten(t, compact, 150)
	last := l.stop(t)
	if _, err := r.cli.Compact(ctx, compact); err != nil {
		t.Fatal(err)
	}
	compactedAt := time.Now()
	waitCaptured(t, a, last, 30*time.Second)

	var found *repository.LastDrill
	waitUntil(t, "a point-in-time drill after the compaction", 2*time.Minute, func() bool {
		drills, err := r.repo.LastDrills(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range drills {
			// A drill that saw the compaction: one started just after
			// Compact returned has been seen to ask the live member
			// for its HashKV and get the compact revision of before
			// (-1) on a loaded machine (CI, 2026-12-04).
			if d.DrillReport != nil && d.PointInTime != nil && d.StartedAt.After(compactedAt) && d.PointInTime.LiveCompactRevision == compact {
				found = d
				return true
			}
		}
		return false
	}, a)
	pt := found.PointInTime
	if !found.Passed {
		t.Fatalf("point-in-time drill of %s to %d failed: %+v", found.BackupID, pt.TargetRevision, found.FailedChecks())
	}
	if pt.TargetRevision < compact || pt.TargetRevision > last {
		t.Errorf("drill target %d outside [compact %d, captured-through %d]", pt.TargetRevision, compact, last)
	}
	if pt.LiveCompactRevision != compact || pt.RestoredHashKV != pt.LiveHashKV || pt.RestoredCompactRevision != compact {
		t.Errorf("drill to %d: live %08x@%d, restored %08x@%d", pt.TargetRevision, pt.LiveHashKV, pt.LiveCompactRevision, pt.RestoredHashKV, pt.RestoredCompactRevision)
	}
	t.Logf("agent drilled revision %d from %s: %d revisions from %d segments in %.3fs (%.0f/s), phases %+v",
		pt.TargetRevision, found.BackupID, pt.Revisions, pt.Segments, pt.ReplaySeconds, pt.RevisionsPerSecond, found.Phases)
	if got := a.metric(`lifeboat_drill_last_result`); got != 1 {
		t.Errorf("lifeboat_drill_last_result %v, want 1", got)
	}
}
