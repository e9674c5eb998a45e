package agent

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// job is one scheduled job and its state.
type job struct {
	name     string
	spec     string
	sched    cron.Schedule
	run      func(ctx context.Context) (backupID string, err error)
	notifyOn string

	running atomic.Bool
	mu      sync.Mutex
	freed   chan struct{} // closed and replaced when running goes false
	last    *RunRecord
	success time.Time
	next    time.Time
}

// lockWait is how long a run at start waits for the lock.
func (a *Agent) lockWait() time.Duration {
	if a.lock == nil {
		return 0
	}
	return a.lock.cfg.TTL + 5*time.Second
}

// waitTimeout waits for wg, at most d; it reports whether wg finished.
func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// leaderCtx returns the context jobs run under while this agent leads,
// waiting up to wait for the lock; nil when it does not lead.
func (a *Agent) leaderCtx(ctx context.Context, wait time.Duration) context.Context {
	if a.lock == nil {
		return ctx
	}
	if wait <= 0 {
		return a.lock.current()
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	return a.lock.wait(wctx)
}

// schedule fires j at each time its schedule names until ctx ends.
func (a *Agent) schedule(ctx context.Context, j *job) {
	var last time.Time
	for {
		now := a.clock.Now()
		from := now
		if from.Before(last) {
			from = last // the clock went back: never fire a time twice
		}
		next := j.sched.Next(from)
		if next.IsZero() {
			return
		}
		j.mu.Lock()
		j.next = next
		j.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(next.Sub(now)):
		}
		last = next
		a.trigger(ctx, j, "schedule")
	}
}

// trigger starts a run of j unless one is still going (then the run is
// skipped, counted and logged) or another agent leads (then it is not
// this agent's run at all).
func (a *Agent) trigger(ctx context.Context, j *job, why string) {
	if ctx.Err() != nil {
		return
	}
	if a.leaderCtx(ctx, 0) == nil {
		a.lg.Debug("not the leader: run left to the agent holding the lock", "job", j.name)
		return
	}
	if !j.running.CompareAndSwap(false, true) {
		a.m.runs.WithLabelValues(j.name, ResultSkipped).Inc()
		a.lg.Warn("run skipped: the previous run is still going", "job", j.name, "trigger", why)
		return
	}
	a.runs.Go(func() {
		defer j.release()
		a.execute(ctx, j, why)
	})
}

// release ends j's run: the next one may start.
func (j *job) release() {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.running.Store(false)
	close(j.freed)
	j.freed = make(chan struct{})
}

// acquire waits until no run of j is going and marks one as going (the
// same no-overlap rule as trigger's, but waiting instead of skipping);
// release ends it.
func (j *job) acquire(ctx context.Context) error {
	for {
		j.mu.Lock()
		freed := j.freed
		j.mu.Unlock()
		if j.running.CompareAndSwap(false, true) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-freed:
		}
	}
}

// execute runs j once (after the jitter) under the leadership context.
func (a *Agent) execute(ctx context.Context, j *job, why string) error {
	return a.executeWith(ctx, j, why, j.run)
}

// executeWith is execute with run instead of j's own run function.
func (a *Agent) executeWith(ctx context.Context, j *job, why string, run func(context.Context) (string, error)) error {
	if a.cfg.Jitter > 0 && why == "schedule" {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-a.clock.After(rand.N(a.cfg.Jitter)):
		}
	}
	lctx := a.leaderCtx(ctx, 0)
	if lctx == nil {
		a.lg.Info("lock lost before the run started: run left to the new holder", "job", j.name)
		return nil
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(lctx, cancel) // the lock was lost: stop
	defer stop()

	rec := &RunRecord{Start: a.clock.Now(), Trigger: why}
	a.lg.Info("job started", "job", j.name, "trigger", why)
	id, err := run(jctx)
	if errors.Is(err, errNotRun) {
		// Nothing was run (capture adopted a stored backup): no run
		// to count, record or notify.
		a.lg.Info("job not run", "job", j.name, "trigger", why, "reason", err.Error())
		return err
	}
	rec.End, rec.BackupID = a.clock.Now(), id
	dur := rec.End.Sub(rec.Start)
	a.m.duration.WithLabelValues(j.name).Observe(dur.Seconds())
	if u := a.unchangedSince.Load(); err == nil && j.name == JobSnapshot && u != nil && u.id == id && !u.at.Before(rec.Start) {
		rec.Unchanged = true
	}
	if err == nil {
		rec.Result = ResultSuccess
		a.m.runs.WithLabelValues(j.name, ResultSuccess).Inc()
		a.m.lastSuccess.WithLabelValues(j.name).Set(unixSeconds(rec.End))
		a.lg.Info("job succeeded", "job", j.name, "backup_id", id, "seconds", logfield.Seconds(dur))
	} else {
		rec.Result, rec.Error = ResultFailure, err.Error()
		a.m.runs.WithLabelValues(j.name, ResultFailure).Inc()
		if jctx.Err() != nil {
			// Shutdown or a lost lock: not a failure of the job itself.
			a.lg.Warn("job cancelled", "job", j.name, "backup_id", id, "seconds", logfield.Seconds(dur), "err", err)
		} else {
			a.lg.Error("job failed", "job", j.name, "backup_id", id, "seconds", logfield.Seconds(dur), "err", err)
			// A drill with nothing to drill proves nothing either way;
			// the stale event covers a store without backups.
			// A drill that reached no verdict is no drill failure either.
			var runErr *drillRunError
			if j.notifyOn != "" && !(j.name == JobDrill && (errors.Is(err, repository.ErrNoBackups) || errors.As(err, &runErr))) {
				a.notif.notify(event{kind: j.notifyOn, backupID: id, err: err.Error(), at: rec.End})
			}
		}
	}
	j.mu.Lock()
	j.last = rec
	if err == nil {
		j.success = rec.End
	}
	j.mu.Unlock()
	if ctx.Err() == nil {
		a.refresh(ctx)
		a.jobEnded(ctx)
		a.syncKube(ctx, j.name, rec.BackupID, err, jctx.Err() != nil)
	}
	return err
}
