package prune

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// TestPruneGenerationWaitsForLock: a generation no rule keeps whose
// segments and marker the store still locks is planned "locked", whole,
// with its anchor kept meanwhile; no error. Once the locks have run out,
// the next run deletes the generation, then its anchor.
func TestPruneGenerationWaitsForLock(t *testing.T) {
	srv := s3test.Start(t)
	s3, _ := jobtest.NewS3Store(t, srv, true)
	st := &lockWatch{S3: s3}
	b := repository.New(st, jobtest.Cluster)
	day := 24 * time.Hour
	now := time.Now().UTC()
	a := jobtest.PutBackup(t, b, now.Add(-5*day), uploader.PutOptions{}, true)
	c := jobtest.PutBackup(t, b, now.Add(-4*day), uploader.PutOptions{}, true)
	jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, true)
	b.Lock = repository.LockPolicy{Retention: uploader.Retention{Mode: uploader.LockCompliance, For: 2 * time.Second}}
	aSegs, aMarkers := putGeneration(t, b, a.ID, a.Revision, 3, now.Add(-5*day+time.Hour), now.Add(-5*day+time.Hour))
	b.Lock = repository.LockPolicy{}
	putGeneration(t, b, c.ID, c.Revision, 1, now.Add(-4*day+time.Hour), now.Add(-4*day+time.Hour))

	job := Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: time.Hour}
	res, err := Run(t.Context(), job, nil)
	if err != nil {
		t.Fatalf("prune while the generation is locked: %v (a lock is no error)", err)
	}
	for _, pg := range res.Plan.Generations {
		if pg.Window.Generation == a.ID && (pg.Action != ActionLocked || !strings.Contains(pg.Problem, a.ID)) {
			t.Errorf("locked generation planned %s (%s), want locked naming an object of it", pg.Action, pg.Problem)
		}
	}
	if len(res.Generations) != 0 || slices.Contains(res.Deleted, a.ID) || res.LockPending == 0 {
		t.Errorf("while locked: generations %v, backups %v deleted, %d pending; want none, none, some", res.Generations, res.Deleted, res.LockPending)
	}
	for _, k := range append(aSegs, aMarkers...) {
		if !exists(t, b, k) {
			t.Errorf("%s deleted while locked", k)
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		res, err = Run(t.Context(), job, nil)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(res.Generations, a.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("generation %s still not deleted after its locks ran out: %+v", a.ID, res.Plan.Generations)
		}
		time.Sleep(200 * time.Millisecond) // polling against the deadline
	}
	if !slices.Contains(res.Deleted, a.ID) {
		t.Errorf("anchor %s not deleted with its generation: %v", a.ID, res.Deleted)
	}
	if len(st.early) > 0 {
		t.Errorf("deleted while locked: %v", st.early)
	}
}
