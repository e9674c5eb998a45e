package agent

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// JobCapture names the capture job in logs and /status. It has no
// schedule and no lifeboat_job_* series: it runs continuously, and its
// own metrics are lifeboat_capture_*.
const JobCapture = "capture"

// ErrCaptureOnce is RunOnce's answer when capture is configured: one
// cycle cannot capture continuously, and silently not capturing would
// look like point-in-time recovery that is not there.
var ErrCaptureOnce = errors.New("agent: capture runs continuously in the daemon; one cycle (--once) cannot capture: run the agent without --once, or disable capture")

// captureMaxBackoff bounds the delay between restarts of a failing
// capture job; a run that lasted at least this long resets the delay.
const captureMaxBackoff = time.Minute

// CaptureHooks is what the agent hands the capture job each time it
// starts it (capture.Job's Token, Report and Snapshot).
type CaptureHooks struct {
	// Token returns the fencing token of the leadership this run belongs
	// to, and false as soon as that leadership is lost (then the job must
	// stop writing; a later leadership of this same agent has another
	// token and another run). With a lock, the token is the create
	// revision of this agent's election key in etcd: it increases from
	// holder to holder. Without a lock it is the agent's start time in
	// Unix nanoseconds: it increases from one process to the next as long
	// as the wall clock does not step back by more than the downtime, and
	// it is never reported lost (also not while the agent stops: the
	// job's final flush still writes).
	Token func() (int64, bool)
	// Report takes every change of the job's Status (metrics, /status).
	Report func(capture.Status)
	// Snapshot takes a fresh verified, committed backup through the
	// agent's snapshot job: it waits for a scheduled snapshot run that
	// is going to end (never two at once), and counts, logs and notifies
	// as a snapshot run (trigger "capture"). The run it waited for, when
	// it succeeded, is returned instead of a second snapshot; a backup
	// already stored at this revision and second is adopted.
	Snapshot func(ctx context.Context) (*repository.Manifest, error)
	// Rollover delivers every backup the scheduled snapshot job commits
	// (the newest when capture is slow to take it): the generation rolls
	// over to it.
	Rollover <-chan *repository.Manifest
	// Stats are the counters the agent exports (shared by every run).
	Stats *capture.Stats
}

// CaptureFunc runs the capture job (capture.Run) until ctx ends or
// hooks.Token reports the lock lost. ctx ends when the agent stops or
// loses the lock. An error return while the agent still leads makes the
// agent start it again after a backoff.
type CaptureFunc func(ctx context.Context, hooks CaptureHooks) error

// captureState is what the agent knows of its capture job.
type captureState struct {
	mu sync.Mutex
	// active: this agent is the one that should capture (enabled, and it
	// leads); since: when it became so.
	active bool
	since  time.Time
	token  int64
	status capture.Status
	// point is the newest recovery point of this activity (zero: none).
	point    time.Time
	restarts int
	lastErr  string
	// roll holds the newest scheduled snapshot for the capture job to
	// roll over to.
	roll    chan *repository.Manifest
	lastGap capture.GapReason
	gapAt   time.Time
	// problems are the store's windows with a problem, as the last
	// refresh listed them ("<generation>: <problem>").
	problems []string
}

// CaptureStatus is the capture section of /status.
type CaptureStatus struct {
	// Active is true while this agent is the one that captures (it leads).
	Active bool `json:"active"`
	// Running is true while the job watches and writes.
	Running bool `json:"running"`
	// Token is the fencing token of the current leadership.
	Token      int64  `json:"token,omitempty"`
	Generation string `json:"generation,omitempty"`
	// Revision is the durable captured-through revision.
	Revision      int64      `json:"revision"`
	RecoveryPoint *time.Time `json:"recovery_point"`
	// LagSeconds is now − the recovery point (null when not active).
	LagSeconds *float64 `json:"lag_seconds"`
	Restarts   int      `json:"restarts"`
	LastError  string   `json:"last_error,omitempty"`
	// LastGap is the reason the last generation was sealed, at LastGapAt.
	LastGap   string     `json:"last_gap,omitempty"`
	LastGapAt *time.Time `json:"last_gap_at,omitempty"`
	// WindowProblems are the store's capture windows with a problem
	// (lifeboat_capture_window_problems counts them), each as
	// "<generation>: <problem>": a fork, a gap, a damaged segment.
	WindowProblems []string `json:"window_problems,omitempty"`
}

// initCapture sets the capture gauges that do not move and the lag's
// scrape function.
func (a *Agent) initCapture() {
	a.capt.roll = make(chan *repository.Manifest, 1)
	if a.cfg.Capture != nil {
		a.m.captureEnabled.Set(1)
	}
	lag := a.captureLag
	a.m.lag.Store(&lag)
}

// captureLag is lifeboat_capture_lag_seconds: now − the recovery point;
// before this activity's first one, the time since it began (the previous
// writer stopped before this agent took over, so the true lag is at least
// that); NaN when this agent does not capture.
func (a *Agent) captureLag() float64 {
	c := &a.capt
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.active {
		return math.NaN()
	}
	from := c.point
	if from.IsZero() {
		from = c.since
	}
	return a.clock.Now().Sub(from).Seconds()
}

// captureLoop runs the capture job for as long as ctx lasts: whenever this
// agent leads, under that leadership, started again with backoff when it
// ends with an error while the agent still leads.
func (a *Agent) captureLoop(ctx context.Context) {
	for ctx.Err() == nil {
		lctx, token := a.captureTerm(ctx)
		if lctx == nil {
			return
		}
		a.captureLead(ctx, lctx, token)
	}
}

// captureTerm waits until this agent leads and returns the leadership
// context and its fencing token (nil when ctx ends first).
func (a *Agent) captureTerm(ctx context.Context) (context.Context, int64) {
	if a.lock == nil {
		return ctx, a.start.UnixNano()
	}
	return a.lock.waitTerm(ctx)
}

// captureLead runs the capture job during one leadership (lctx, token):
// until ctx or lctx ends, restarting it after errors.
func (a *Agent) captureLead(ctx, lctx context.Context, token int64) {
	c := &a.capt
	c.mu.Lock()
	c.active, c.since, c.token, c.point, c.status = true, a.clock.Now(), token, time.Time{}, capture.Status{}
	c.mu.Unlock()
	defer func() {
		// No longer this agent's to capture: no lag, no durable point.
		c.mu.Lock()
		c.active, c.token, c.point, c.status = false, 0, time.Time{}, capture.Status{}
		c.mu.Unlock()
		a.m.captureUp.Set(0)
		a.m.captureRevision.Set(0)
		a.m.captureRecovery.Set(0)
	}()
	tokenFunc := func() (int64, bool) { return token, lctx.Err() == nil }
	if a.lock == nil {
		// No lock, nothing to lose: the token stays valid through the
		// agent's shutdown, so that the job's final flush stores what it
		// buffered (lctx is the agent's own context here).
		tokenFunc = func() (int64, bool) { return token, true }
	}
	delay := a.cfg.CaptureBackoff
	for {
		rctx, cancel := context.WithCancel(ctx)
		stop := context.AfterFunc(lctx, cancel) // the lock was lost: stop
		began := a.clock.Now()
		a.lg.Info("capture started", "job", JobCapture, "token", token)
		err := a.cfg.Capture(rctx, CaptureHooks{Token: tokenFunc, Report: a.captureReport, Snapshot: a.captureSnapshot,
			Rollover: a.capt.roll, Stats: a.m.captureStats})
		stop()
		cancel()
		a.m.captureUp.Set(0)
		c.mu.Lock()
		c.status.Running = false
		if err != nil {
			c.lastErr = err.Error()
		}
		c.mu.Unlock()
		switch {
		case ctx.Err() != nil:
			a.lg.Info("capture stopped: the agent is stopping", "job", JobCapture, "err", err)
			return
		case lctx.Err() != nil:
			a.lg.Warn("capture stopped: the leader lock was lost; the new holder captures", "job", JobCapture, "err", err)
			return
		}
		if a.clock.Now().Sub(began) >= captureMaxBackoff {
			delay = a.cfg.CaptureBackoff
		}
		if err == nil {
			err = errors.New("returned while this agent still leads")
		}
		a.m.captureRestarts.Inc()
		c.mu.Lock()
		c.restarts++
		c.lastErr = err.Error()
		c.mu.Unlock()
		a.lg.Error("capture failed; starting it again", "job", JobCapture, "retry_in_seconds", logfield.Seconds(delay), "err", err)
		select {
		case <-ctx.Done():
			return
		case <-lctx.Done():
			a.lg.Warn("capture not restarted: the leader lock was lost; the new holder captures", "job", JobCapture)
			return
		case <-a.clock.After(delay):
		}
		delay = min(delay*2, captureMaxBackoff)
	}
}

// captureReport takes a Status from the capture job.
func (a *Agent) captureReport(s capture.Status) {
	c := &a.capt
	now := a.clock.Now()
	c.mu.Lock()
	if !c.active {
		// A report after its run ended (the contract says none comes):
		// a gap is still a gap; the state is no longer this agent's.
		c.mu.Unlock()
		if s.Gap != "" {
			a.m.captureGaps.WithLabelValues(string(s.Gap)).Inc()
		}
		return
	}
	c.status = s
	if !s.RecoveryPoint.IsZero() {
		// A new generation's first report may come without one: the
		// older point stays what a restore can reach.
		c.point = s.RecoveryPoint
	}
	if s.Err != nil {
		c.lastErr = s.Err.Error()
	}
	if s.Gap != "" {
		c.lastGap, c.gapAt = s.Gap, now
	}
	point := c.point
	c.mu.Unlock()
	a.m.captureUp.Set(b2f(s.Running))
	a.m.captureRevision.Set(float64(s.Revision))
	if !point.IsZero() {
		a.m.captureRecovery.Set(unixSeconds(point))
	}
	if s.Gap != "" {
		a.m.captureGaps.WithLabelValues(string(s.Gap)).Inc()
		a.lg.Warn("capture gap: generation sealed; a new one starts from a fresh snapshot", "job", JobCapture,
			"reason", string(s.Gap), "generation", s.Generation, "revision", s.Revision, "err", errString(s.Err))
	}
}

// captureSnapshot takes capture's fresh snapshot as a run of the snapshot
// job: after any run that is going (no two at once), counted and logged
// as one, so that a scheduled run due meanwhile is skipped as usual.
//
// It takes none when a committed one of this moment is there already:
// a snapshot run that ended while capture waited for it (run at start,
// a scheduled run) is returned as it is, and a backup already stored at
// the id of this revision and second (backup.ExistsError) is adopted once
// its manifest is there. A second snapshot would leave every revision
// between the two outside capture's window.
func (a *Agent) captureSnapshot(ctx context.Context) (*repository.Manifest, error) {
	j := a.byName[JobSnapshot]
	if j == nil {
		return nil, errors.New("capture snapshot: the agent has no snapshot job")
	}
	j.mu.Lock()
	before := j.last
	j.mu.Unlock()
	if err := j.acquire(ctx); err != nil {
		return nil, fmt.Errorf("capture snapshot: wait for the running snapshot: %w", err)
	}
	defer j.release()
	if m := a.waitedSnapshot(ctx, j, before); m != nil {
		return m, nil
	}
	var m *repository.Manifest
	err := a.executeWith(ctx, j, JobCapture, func(ctx context.Context) (string, error) {
		for attempt := 0; ; attempt++ {
			var err error
			m, err = a.takeSnapshotRetry(ctx, false, false)
			if err == nil {
				return m.ID, nil
			}
			var ee *backup.ExistsError
			if !errors.As(err, &ee) {
				return "", err
			}
			// A backup of this revision was stored in this second (ids
			// have a resolution of a second): a committed snapshot at
			// the exact revision, which capture adopts.
			if m, err = a.committedBackup(ctx, ee.ID); err == nil {
				return "", fmt.Errorf("%w: capture adopts backup %s, stored at this revision in this second", errNotRun, m.ID)
			}
			if attempt >= 2 {
				return "", err
			}
			// Not committed in time: one of capture's own, which the
			// next second allows.
			a.lg.Warn("capture snapshot: the backup of this revision and second is not committed; taking another in the next second", "job", JobCapture, "backup_id", ee.ID, "err", err)
			now := a.clock.Now()
			select {
			case <-ctx.Done():
				return "", err
			case <-a.clock.After(now.Truncate(time.Second).Add(time.Second).Sub(now)):
			}
		}
	})
	if err != nil && !errors.Is(err, errNotRun) {
		return nil, fmt.Errorf("capture snapshot: %w", err)
	}
	if m == nil {
		return nil, errors.New("capture snapshot: not taken: the leader lock was lost")
	}
	return m, nil
}

// errNotRun is a run function's answer when it found nothing to run
// (capture adopted a backup already stored): executeWith counts and
// records no run.
var errNotRun = errors.New("not run")

// waitedSnapshot returns the backup of the snapshot run of j that ended
// successfully after before was its last (while capture waited for it),
// nil when none did or its manifest cannot be read.
func (a *Agent) waitedSnapshot(ctx context.Context, j *job, before *RunRecord) *repository.Manifest {
	j.mu.Lock()
	last := j.last
	j.mu.Unlock()
	if last == nil || last == before || last.Result != ResultSuccess || last.BackupID == "" {
		return nil
	}
	m, err := a.cfg.Snapshot.Backups.Manifest(ctx, last.BackupID)
	if err != nil {
		a.lg.Warn("capture snapshot: the snapshot run that just ended cannot be read; taking one", "job", JobCapture, "backup_id", last.BackupID, "err", err)
		return nil
	}
	a.lg.Info("capture snapshot: using the snapshot run that just ended", "job", JobCapture, "backup_id", m.ID, "trigger", last.Trigger)
	return m
}

// captureAdoptWait bounds how long capture waits for the manifest of a
// backup stored at its snapshot's id (being written by another run).
const captureAdoptWait = 30 * time.Second

// committedBackup returns backup id's manifest, waiting up to
// captureAdoptWait for it to be written.
func (a *Agent) committedBackup(ctx context.Context, id string) (*repository.Manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, captureAdoptWait)
	defer cancel()
	for {
		m, err := a.cfg.Snapshot.Backups.Manifest(ctx, id)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, uploader.ErrNotFound) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("backup %s not committed within %s: %w", id, captureAdoptWait, err)
		case <-a.clock.After(200 * time.Millisecond):
		}
	}
}

// refreshWindows sets lifeboat_capture_window_problems from the store's
// capture windows (l is the snapshot listing refresh just read): a fork
// by a second writer ends a window while every writer's own metrics look
// healthy. It returns the windows' untrusted progress markers (for
// lifeboat_untrusted_objects), or an error when the windows could not be
// listed. Only with capture configured: the listing of the change
// segments is capture's cost.
func (a *Agent) refreshWindows(ctx context.Context, l *repository.Listing) (untrusted int, err error) {
	if a.cfg.Capture == nil {
		return 0, nil
	}
	ws, err := a.cfg.Backups.Windows(ctx, l)
	if err != nil {
		if ctx.Err() == nil {
			a.lg.Warn("cannot list the capture windows", "err", err)
		}
		return 0, err
	}
	var problems []string
	for i := range ws {
		if ws[i].Problem != "" {
			problems = append(problems, ws[i].Generation+": "+ws[i].Problem)
		}
		untrusted += len(ws[i].Untrusted)
	}
	a.m.captureWindows.Set(float64(len(problems)))
	a.capt.mu.Lock()
	a.capt.problems = problems
	a.capt.mu.Unlock()
	return untrusted, nil
}

// captureStatus is the capture section of /status (nil without capture).
func (a *Agent) captureStatus(now time.Time) *CaptureStatus {
	if a.cfg.Capture == nil {
		return nil
	}
	c := &a.capt
	c.mu.Lock()
	defer c.mu.Unlock()
	st := &CaptureStatus{
		Active: c.active, Running: c.status.Running, Token: c.token, Generation: c.status.Generation,
		Revision: c.status.Revision, Restarts: c.restarts, LastError: c.lastErr, LastGap: string(c.lastGap),
		WindowProblems: slices.Clone(c.problems),
	}
	if !c.point.IsZero() {
		t := c.point
		st.RecoveryPoint = &t
	}
	if c.active {
		from := c.point
		if from.IsZero() {
			from = c.since
		}
		lag := now.Sub(from).Seconds()
		st.LagSeconds = &lag
	}
	if !c.gapAt.IsZero() {
		t := c.gapAt
		st.LastGapAt = &t
	}
	return st
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// offerRollover hands a committed scheduled backup to the capture job,
// replacing one it has not taken yet (only the newest matters).
func (a *Agent) offerRollover(m *repository.Manifest) {
	if a.cfg.Capture == nil {
		return
	}
	for {
		select {
		case a.capt.roll <- m:
			return
		default:
		}
		select {
		case <-a.capt.roll:
		default:
		}
	}
}
