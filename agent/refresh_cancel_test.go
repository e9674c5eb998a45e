package agent

import (
	"context"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestRefreshCanceledKeepsGauges: a refresh cut short by shutdown (its
// context ends while it reads the store) learns nothing, so it must change
// nothing. Before, a canceled listing set lifeboat_store_up to 0 (this test
// failed so), and a canceled read of the drill history set the
// newest-proven gauge to 0 as if nothing were proven
// (TestDrillRunErrorIsNoVerdict saw that once under load).
func TestRefreshCanceledKeepsGauges(t *testing.T) {
	f := newFixture(t, nil, 50)
	lg, _ := testLogger(t)
	m, err := Snapshot(t.Context(), SnapshotJob{Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups, Version: "test"}, lg)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: f.backups.Cluster, StartedAt: time.Now().UTC().Add(-time.Second), FinishedAt: time.Now().UTC(), Passed: true}
	if err := f.backups.PutDrillReport(t.Context(), r); err != nil {
		t.Fatalf("PutDrillReport: %v", err)
	}
	cfg := f.config(t, lg)
	cfg.Snapshot, cfg.Prune, cfg.Drill = nil, nil, nil
	a, err := New(cfg, lg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	a.refresh(t.Context())
	want := unixOrZero(m)
	if v := must(t, gather(t, a.reg), "lifeboat_backup_newest_proven_timestamp_seconds"); v != want {
		t.Fatalf("newest proven = %v after a refresh, want %v", v, want)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	a.refresh(ctx)
	mfs := gather(t, a.reg)
	if v := must(t, mfs, "lifeboat_backup_newest_proven_timestamp_seconds"); v != want {
		t.Errorf("newest proven = %v after a canceled refresh, want it unchanged: %v", v, want)
	}
	if v := must(t, mfs, "lifeboat_store_up"); v != 1 {
		t.Errorf("lifeboat_store_up = %v after a canceled refresh, want it unchanged: 1", v)
	}
}
