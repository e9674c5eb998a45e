package prune

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// lockWatch is the real S3 store, watched: before each Delete it asks
// the store whether the object is still locked, and records it if so.
type lockWatch struct {
	*uploader.S3
	mu    sync.Mutex
	early []string
	n     int
}

func (w *lockWatch) Delete(ctx context.Context, key string) error {
	info, err := w.S3.Stat(ctx, key)
	w.mu.Lock()
	w.n++
	if err == nil && info.Locked(time.Now()) {
		w.early = append(w.early, fmt.Sprintf("%s (locked until %s)", key, info.RetainUntil))
	}
	w.mu.Unlock()
	return w.S3.Delete(ctx, key)
}

// TestPruneUnderObjectLockLevelsOff: a backup (data object, manifest,
// drill report, all COMPLIANCE-locked for 2 s) every 400 ms and a prune
// after each that keeps the last 2, for several lock periods: no run
// fails because of a lock, nothing is deleted while the store still locks
// it, the backups level off at what the policy keeps plus those still
// locked, and once the locks have run out prune brings them to the
// policy's count.
func TestPruneUnderObjectLockLevelsOff(t *testing.T) {
	srv := s3test.Start(t)
	s3, _ := jobtest.NewS3Store(t, srv, true)
	st := &lockWatch{S3: s3}
	b := repository.New(st, jobtest.Cluster)
	lockFor := 2 * time.Second
	b.Lock = repository.LockPolicy{Retention: uploader.Retention{Mode: uploader.LockCompliance, For: lockFor}}
	const every = 400 * time.Millisecond
	job := Job{Backups: b, Policy: retention.Policy{Last: 2}}
	maxListed, pending := 0, 0
	for i := range 20 {
		now := time.Now().UTC()
		m := jobtest.PutBackup(t, b, now, b.Lock.Options("application/octet-stream"), false)
		err := b.PutDrillReport(t.Context(), &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: b.Cluster,
			StartedAt: now, FinishedAt: now.Add(time.Second), Passed: true, AgentVersion: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := Run(t.Context(), job, nil)
		if err != nil {
			t.Fatalf("prune %d: %v", i, err)
		}
		pending += len(res.Locked)
		ids, _ := jobtest.Listed(t, b)
		maxListed = max(maxListed, len(ids))
		time.Sleep(every) // the backup schedule, not a wait for an effect
	}
	// At most the 2 kept plus those within one lock period of their
	// write, and a backup of slack for the run's own timing.
	if limit := 2 + int(lockFor/every) + 1; maxListed > limit {
		t.Errorf("up to %d backups listed, want them to level off at %d", maxListed, limit)
	}
	if pending == 0 {
		t.Errorf("no backup ever waited for its lock: the test's locks are too short to say anything")
	}
	// The last locks run out on the store's clock: prune until they have.
	deadline := time.Now().Add(lockFor + 10*time.Second)
	for {
		res, err := Run(t.Context(), job, nil)
		if err != nil {
			t.Fatalf("prune after the schedule: %v", err)
		}
		ids, _ := jobtest.Listed(t, b)
		if len(ids) == 2 && len(res.Locked) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the locks ran out: %d backups listed, %v locked; want 2, none", len(ids), res.Locked)
		}
		time.Sleep(200 * time.Millisecond) // polling against the deadline
	}
	if st.n == 0 || len(st.early) > 0 {
		t.Errorf("%d deletes, of objects still locked: %v; want some, none locked", st.n, st.early)
	}
}
