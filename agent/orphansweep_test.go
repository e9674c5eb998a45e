package agent

import (
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestAgentNoOrphanSweepDuringSnapshot: in the daemon, prune removes no
// orphan while a snapshot of the cluster is in flight, whatever the grace
// (here 1ns, below any floor: only the in-flight rule protects the
// snapshot's data object); an old orphan waits for the next run.
func TestAgentNoOrphanSweepDuringSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 200)
	lg, _ := testLogger(t)
	old := jobtest.PutObject(t, f.backups, time.Now().Add(-72*time.Hour), uploader.PutOptions{})
	reached := make(chan string, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold)
	held := &repository.Repo{Store: jobtest.HoldStore{Store: f.backups.Store, Reached: reached, Release: release}, Cluster: testCluster}

	cfg := f.config(t, lg)
	cfg.Snapshot.Backups = held
	cfg.Prune.OrphanGrace = time.Nanosecond
	cfg.Prune.Policy = retention.Policy{Last: 5}
	cfg.Drill = nil
	cfg.Schedules = Schedules{Snapshot: "@every 1h", Prune: "@every 1h"}
	cfg.Listen = ""
	a, err := New(cfg, lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.runs.Wait)
	snap := a.byName[JobSnapshot]
	a.trigger(t.Context(), snap, "test")
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("the snapshot never reached its manifest")
	}
	if _, err := a.prune(t.Context()); err != nil {
		t.Errorf("prune during the snapshot: %v", err)
	}
	_, orphans := jobtest.Listed(t, f.backups)
	if len(orphans) != 2 {
		t.Errorf("orphans after a prune during the snapshot: %q; want the old one and the snapshot's data object", orphans)
	}
	unhold()
	waitFor(t, "the snapshot to end", time.Minute, func() bool { return !snap.running.Load() })
	snap.mu.Lock()
	last := snap.last
	snap.mu.Unlock()
	if last == nil || last.Result != ResultSuccess {
		t.Fatalf("snapshot run: %+v", last)
	}
	ids, orphans := jobtest.Listed(t, f.backups)
	if len(ids) != 1 || ids[0] != last.BackupID || len(orphans) != 1 {
		t.Errorf("after the snapshot: backups %q, orphans %q; want [%s] and the old orphan", ids, orphans, last.BackupID)
	}
	// No snapshot in flight: the old orphan goes.
	if _, err := a.prune(t.Context()); err != nil {
		t.Errorf("prune: %v", err)
	}
	if _, orphans := jobtest.Listed(t, f.backups); len(orphans) != 0 {
		t.Errorf("orphans after prune with no snapshot in flight: %q; want %s removed", orphans, old.Object)
	}
}
