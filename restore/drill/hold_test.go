package drill_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
)

// TestDrillHoldsItsBackup: a prune of the same process (the agent's
// schedules run side by side) that runs while a drill reads a backup
// leaves that backup for a later run, as it does for a point-in-time
// drill's objects. Before, only point-in-time drills held what they read:
// on a loaded machine the agent pruned every backup it was drilling (keep
// 2 of @every 1s snapshots, drills slower than two periods), each drill
// passed on a backup already gone, and no listed backup was ever proven
// (TestAgentEndToEnd: lifeboat_backup_newest_proven_timestamp_seconds 0).
func TestDrillHoldsItsBackup(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	src := restoretest.StartSource(t, 50)
	b := restoretest.DirRepo(t, t.TempDir())
	enc := repository.Encoding{Compression: "zstd"}
	old := src.Backup(t, b, enc)
	time.Sleep(1100 * time.Millisecond) // backup ids name the second
	newer := src.Backup(t, b, enc)

	var res *prune.Result
	var pruneErr error
	rep, err := drill.Run(t.Context(), drill.Options{
		Backups: b, Manifest: old, ScratchDir: t.TempDir(), Version: "test",
		OnBoot: func(*child.Etcd) {
			res, pruneErr = prune.Run(t.Context(), prune.Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: time.Hour}, nil)
		},
	})
	if err != nil || !rep.Passed {
		t.Fatalf("drill of %s: %v (passed %v)", old.ID, err, rep != nil && rep.Passed)
	}
	if pruneErr != nil {
		t.Fatalf("prune during the drill: %v", pruneErr)
	}
	if slices.Contains(res.Deleted, old.ID) {
		t.Fatalf("prune deleted %s while a drill read it (deleted %v)", old.ID, res.Deleted)
	}
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range l.Backups {
		ids = append(ids, e.Manifest.ID)
	}
	if !slices.Contains(ids, old.ID) || !slices.Contains(ids, newer.ID) {
		t.Fatalf("listed %v, want both %s (drilled) and %s", ids, old.ID, newer.ID)
	}
	// Released when the drill ended: the next prune deletes it.
	res, err = prune.Run(t.Context(), prune.Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Deleted, old.ID) {
		t.Errorf("prune after the drill deleted %v, want %s", res.Deleted, old.ID)
	}
}
