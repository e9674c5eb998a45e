package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// snapshot runs the snapshot job, retrying failed attempts with backoff.
// With Snapshot.SkipUnchanged, a cluster unchanged since its newest
// backup is checked, not stored again: a successful run named for that
// backup.
func (a *Agent) snapshot(ctx context.Context) (string, error) {
	m, err := a.takeSnapshotRetry(ctx, true, a.cfg.Snapshot.SkipUnchanged)
	var ue *backup.UnchangedError
	if errors.As(err, &ue) {
		a.m.unchanged.Inc()
		a.noteUnchanged(ue.Backup.ID)
		a.lg.Info("cluster unchanged since the newest backup; not stored again", "backup_id", ue.Backup.ID,
			"revision", ue.Backup.Revision, "hash_kv", fmt.Sprintf("%08x", ue.Backup.HashKV), "members", ue.Members)
		return ue.Backup.ID, nil
	}
	if err != nil {
		return "", err
	}
	a.unchangedSince.Store(nil)
	a.offerRollover(m)
	return m.ID, nil
}

// takeSnapshotRetry takes a snapshot, retrying failed attempts, and
// returns the committed backup's manifest; with !retryExists, a backup already
// stored at this revision and second (backup.ErrExists) is returned at
// once instead of retried (capture adopts that one). With skipUnchanged
// a *backup.UnchangedError is returned at once.
func (a *Agent) takeSnapshotRetry(ctx context.Context, retryExists, skipUnchanged bool) (*repository.Manifest, error) {
	sj := *a.cfg.Snapshot
	sj.SkipUnchanged = skipUnchanged
	sj.Now = a.clock.Now
	b := *sj.Backups
	b.Store = countingStore{Store: b.Store, c: a.m.uploadBytes}
	sj.Backups = &b
	delay := a.cfg.RetryBackoff
	for attempt := 0; ; attempt++ {
		actx, cancel := ctx, context.CancelFunc(func() {})
		if a.cfg.SnapshotTimeout > 0 {
			actx, cancel = context.WithTimeout(ctx, a.cfg.SnapshotTimeout)
		}
		m, err := backup.Run(actx, sj, a.lg)
		cancel()
		if err == nil {
			a.m.snapSize.WithLabelValues("raw").Set(float64(m.DBSize))
			a.m.snapSize.WithLabelValues("stored").Set(float64(m.ObjectSize))
			a.m.snapRevision.Set(float64(m.Revision))
			if backup.HashKVFailed(m) {
				a.m.hashKVErrors.Inc()
			}
			a.kickCopies()
			return m, nil
		}
		var ue *backup.UnchangedError
		if errors.As(err, &ue) {
			return nil, err
		}
		if ctx.Err() != nil || attempt >= a.cfg.SnapshotRetries || (!retryExists && errors.Is(err, backup.ErrExists)) {
			if attempt > 0 {
				err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return nil, err
		}
		a.lg.Warn("snapshot failed; retrying", "attempt", attempt+1, "of", a.cfg.SnapshotRetries+1, "retry_in_seconds", logfield.Seconds(delay), "err", err)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (retry cancelled: %v)", err, ctx.Err())
		case <-a.clock.After(delay):
		}
		delay = min(delay*2, prune.MaxRetryBackoff)
	}
}

// prune runs the prune job with the drill history, so that the newest
// proven backup is kept.
func (a *Agent) prune(ctx context.Context) (string, error) {
	pj := *a.cfg.Prune
	pj.Now = a.clock.Now
	// Never sweep orphans while this agent's snapshot is in flight: its
	// data object has no manifest yet, its multipart upload is incomplete.
	if j := a.byName[JobSnapshot]; j != nil {
		pj.SnapshotRunning = j.running.Load
	}
	drills, err := a.drillRecords(ctx)
	if err != nil {
		// Without the history prune could delete the newest proven backup.
		return "", fmt.Errorf("prune not run: %w", err)
	}
	pj.DrillPassed, pj.DrillUnknown = map[string]bool{}, map[string]bool{}
	for id, r := range drills {
		pj.DrillPassed[id] = r.Passed
		if r.Unknown {
			pj.DrillUnknown[id] = true
			a.lg.Warn("last drill of backup unknown: kept if it may be the newest proven", "backup_id", id, "err", r.Err)
		}
	}
	res, err := prune.Run(ctx, pj, a.lg)
	if res != nil {
		a.m.deleted.Add(float64(len(res.Deleted)))
	}
	return "", errors.Join(err, a.pruneCopies(ctx))
}

// drill runs the drill job and records its outcome: the verdict goes to
// the drill gauges, and the job fails when the drill did not pass or its
// report could not be stored.
func (a *Agent) drill(ctx context.Context) (string, error) {
	if c := a.drillStore(ctx); c != nil {
		return a.drillCopy(ctx, c)
	}
	out, err := a.cfg.Drill(ctx)
	now := a.clock.Now()
	if out == nil && errors.Is(err, repository.ErrNoBackups) {
		return "", err // no verdict on any backup
	}
	passed := out != nil && out.Passed
	if ctx.Err() != nil && !passed {
		// Cancelled (shutdown, lock lost): no verdict on the backup.
		if err == nil {
			err = ctx.Err()
		}
		return outcomeID(out), err
	}
	if out == nil || out.RunError {
		// The drill could not run to a verdict: an error of the run, not
		// of the backup; verdicts and proven backups stay as they were.
		a.m.drillErrors.Inc()
		a.m.drillErrTime.Set(unixSeconds(now))
		if err == nil {
			err = errors.New("no verdict")
			if out != nil && out.Error != "" {
				err = errors.New(out.Error)
			}
		}
		return outcomeID(out), &drillRunError{err: err}
	}
	a.mu.Lock()
	a.lastDrill = now
	a.m.drillTime.Set(unixSeconds(now))
	a.m.drillResult.Set(b2f(passed))
	a.mu.Unlock()
	if out != nil {
		for _, p := range DrillPhases {
			a.m.drillPhase.WithLabelValues(p).Set(out.Phases[p].Seconds())
		}
		if out.Recovery > 0 {
			a.m.drillRecover.Set(out.Recovery.Seconds())
		}
		if !out.KitCertExpiry.IsZero() {
			a.mu.Lock()
			if out.BackupID >= a.m.kitExpiryFrom {
				a.m.kitExpiry.Set(unixSeconds(out.KitCertExpiry))
				a.m.kitExpiryFrom = out.BackupID
			}
			a.mu.Unlock()
		}
		if out.BackupID != "" {
			a.mu.Lock()
			a.drills[out.BackupID] = drill.Record{Passed: passed, At: now}
			a.mu.Unlock()
		}
	}
	switch {
	case err != nil:
		return outcomeID(out), err
	case !passed:
		msg := "drill failed"
		if out != nil && out.Error != "" {
			msg = out.Error
		}
		return outcomeID(out), fmt.Errorf("drill of backup %s failed: %s", orNone(outcomeID(out)), msg)
	}
	return out.BackupID, nil
}

// drillRunError is a drill that reached no verdict; it is not notified
// as drill_failed (LifeboatDrillError alerts on the metrics).
type drillRunError struct{ err error }

func (e *drillRunError) Error() string { return "drill could not run: " + e.err.Error() }

func (e *drillRunError) Unwrap() error { return e.err }

func outcomeID(o *drill.Outcome) string {
	if o == nil {
		return ""
	}
	return o.BackupID
}

// drillRecords merges the store's drill history with the drills this agent
// ran; the newer record of a backup wins.
func (a *Agent) drillRecords(ctx context.Context) (map[string]drill.Record, error) {
	out := map[string]drill.Record{}
	if a.cfg.DrillHistory != nil {
		h, err := a.cfg.DrillHistory(ctx)
		if err != nil {
			return nil, fmt.Errorf("read drill history: %w", err)
		}
		for id, r := range h {
			out[id] = r
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, r := range a.drills {
		if o, ok := out[id]; !ok || r.At.After(o.At) {
			out[id] = r
		}
	}
	return out, nil
}

// countingStore counts the bytes Put reads into c.
type countingStore struct {
	uploader.Store
	c prometheus.Counter
}

func (s countingStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	return s.Store.Put(ctx, key, &countingReader{r: r, c: s.c}, opts)
}

type countingReader struct {
	r io.Reader
	c prometheus.Counter
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.c.Add(float64(n))
	}
	return n, err
}

// unchanged is the last snapshot run's finding that the cluster was
// unchanged since backup id, at time at.
type unchanged struct {
	id string
	at time.Time
}

// noteUnchanged records that the cluster was found unchanged since
// backup id now.
func (a *Agent) noteUnchanged(id string) {
	a.unchangedSince.Store(&unchanged{id: id, at: a.clock.Now()})
}
