package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestSnapshotUnchanged: on an idle cluster the agent's scheduled snapshot
// is not stored again: the run is a success (last success advances, so
// LifeboatBackupMissing stays quiet), lifeboat_snapshot_unchanged_total
// counts it, the log says so, and the status document names the backup
// the cluster is unchanged since (the fleet's staleness reads it). A
// write makes the next run store a backup again (issue 29).
func TestSnapshotUnchanged(t *testing.T) {
	lg, logs := testLogger(t)
	f := newFixture(t, nil, 20)
	cfg := f.config(t, lg)
	cfg.Listen, cfg.Drill, cfg.Prune = "", nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 10m"}
	cfg.Snapshot.SkipUnchanged = true
	runOnce := func(cycle int) *Agent {
		t.Helper()
		a, err := New(cfg, lg)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.RunOnce(t.Context()); err != nil {
			t.Fatalf("cycle %d: RunOnce: %v", cycle, err)
		}
		return a
	}
	runOnce(1)
	first := manifests(t, f.backups)
	a := runOnce(2)
	if got := manifests(t, f.backups); len(got) != 1 {
		t.Fatalf("backups after an idle cycle: %v; want only %v", got, first)
	}
	if r := a.byName[JobSnapshot].last; r == nil || !r.Unchanged || r.BackupID != first[0] || r.Result != ResultSuccess {
		t.Errorf("the snapshot job's last run: %+v; want a success, unchanged since %s", r, first[0])
	}
	mfs := gather(t, a.Registry())
	if v := must(t, mfs, "lifeboat_snapshot_unchanged_total"); v != 1 {
		t.Errorf("lifeboat_snapshot_unchanged_total = %v, want 1", v)
	}
	if v := must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess); v != 1 {
		t.Errorf("successful snapshot runs = %v, want 1", v)
	}
	if v := must(t, mfs, "lifeboat_job_last_success_timestamp_seconds", JobLabel, JobSnapshot); v < float64(time.Now().Add(-time.Minute).Unix()) {
		t.Errorf("last success %v: did not advance", v)
	}
	if !strings.Contains(logs.String(), "cluster unchanged since the newest backup; not stored again") {
		t.Errorf("no log line says the snapshot was unchanged:\n%s", logs.String())
	}
	got, err := f.backups.AgentStatuses(t.Context())
	if err != nil || len(got) != 1 || got[0].Err != nil {
		t.Fatalf("AgentStatuses: %v, %+v", err, got)
	}
	j := got[0].Status.Jobs[JobSnapshot]
	if j.LastResult != ResultSuccess || j.UnchangedSince != first[0] || j.LastUnchanged == nil || j.LastSuccess == nil || !j.LastUnchanged.Equal(*j.LastSuccess) {
		t.Errorf("snapshot job in the status document: %+v; want unchanged since %s at its last success", j, first[0])
	}

	if _, err := f.etcd.Client(t).Put(t.Context(), "/cycle", "x"); err != nil {
		t.Fatal(err)
	}
	runOnce(3)
	if got := manifests(t, f.backups); len(got) != 2 {
		t.Errorf("backups after a write: %v; want 2", got)
	}
}

// TestNewestProvenWhenUnchanged: a cluster found unchanged since its
// newest backup, whose drill passed, is proven as of that check:
// lifeboat_backup_newest_proven_timestamp_seconds is the check's time, so
// that LifeboatNoProvenBackup (48 h) does not fire on an idle cluster
// whose one state is drilled every day. Unchanged since another backup
// than the proven one proves nothing new.
func TestNewestProvenWhenUnchanged(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, []string{JobSnapshot}, "test")
	if err != nil {
		t.Fatal(err)
	}
	created := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	checked := created.Add(72 * time.Hour)
	proven := &repository.Manifest{ID: "20261201T000000Z-r5", CreatedAt: created}
	a := &Agent{m: m, clock: newFakeClock(checked)}
	a.noteUnchanged(proven.ID)
	a.setBackupGauges(backupState{newest: proven, newestProven: proven})
	if got := must(t, gather(t, reg), "lifeboat_backup_newest_proven_timestamp_seconds"); got != float64(checked.Unix()) {
		t.Errorf("newest proven = %v, want the unchanged check's time %d", got, checked.Unix())
	}
	a.noteUnchanged("20261130T000000Z-r4")
	a.setBackupGauges(backupState{newest: proven, newestProven: proven})
	if got := must(t, gather(t, reg), "lifeboat_backup_newest_proven_timestamp_seconds"); got != float64(created.Unix()) {
		t.Errorf("newest proven = %v, want the backup's creation %d", got, created.Unix())
	}
}

// TestNotStaleWhenUnchanged: the stale event counts the newest backup's
// age from the last check that found the cluster unchanged since it: an
// idle cluster is not stale; a check against an older backup does not
// count.
func TestNotStaleWhenUnchanged(t *testing.T) {
	lg, logs := testLogger(t)
	now := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(now)
	newest := &repository.Manifest{ID: "20261204T070000Z-r5", CreatedAt: now.Add(-5 * time.Hour)}
	a := &Agent{cfg: Config{StaleAfter: 3 * time.Hour}, lg: lg, clock: clock}
	a.notif = newNotifier(NotifyConfig{}, "c", "a", clock, nil, lg)
	a.noteUnchanged(newest.ID)
	a.checkStale(now, backupState{newest: newest})
	if a.stale || strings.Contains(logs.String(), "backups are stale") {
		t.Errorf("stale although the cluster was found unchanged since %s just now:\n%s", newest.ID, logs.String())
	}
	a.noteUnchanged("20261204T060000Z-r4")
	a.checkStale(now, backupState{newest: newest})
	if !a.stale {
		t.Errorf("not stale: the unchanged check was against another backup than the newest")
	}
}
