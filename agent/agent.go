package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Schedules are cron expressions (robfig/cron: five fields with optional
// seconds, descriptors like @every 30m or @daily, CRON_TZ=Zone prefix). An
// empty schedule disables that job.
type Schedules struct {
	Snapshot string
	Prune    string
	Drill    string
}

// Config is what an Agent runs.
type Config struct {
	// Cluster is the cluster name inside the store (for the lock key and
	// notifications).
	Cluster string
	// Backups is the cluster's backup area: listed after every job for
	// the backup gauges, and checked by /readyz.
	Backups *repository.Repo
	// Snapshot, Prune and Drill are the jobs; a nil job, or an empty
	// schedule, disables it. The agent sets Snapshot.Now and
	// Prune.Now from Clock and Prune.DrillPassed from the drill history.
	Snapshot *backup.Job
	Prune    *prune.Job
	Drill    DrillFunc
	// Capture, when not nil, is the continuous capture job (see
	// CaptureFunc): run without a schedule, for as long as this agent
	// leads. It needs Snapshot (its fresh snapshots are snapshot runs).
	Capture CaptureFunc
	// CaptureBackoff is the first delay before the capture job is started
	// again after it ended with an error (default 1s), doubling each time
	// up to a minute.
	CaptureBackoff time.Duration
	// DrillHistory returns the last drill of each backup (nil: the drill
	// reports in Backups, see drill.StoreHistory). The drills this
	// agent ran count too.
	DrillHistory drill.HistoryFunc
	Schedules    Schedules
	// Jitter delays each scheduled run by a random time up to this.
	Jitter time.Duration
	// RunAtStart takes a snapshot as soon as the agent leads.
	RunAtStart bool
	// SnapshotRetries is how often a failed snapshot is tried again before
	// the run counts as failed; RetryBackoff is the first delay (default
	// 10s), doubling each time up to 5 minutes.
	SnapshotRetries int
	RetryBackoff    time.Duration
	// SnapshotTimeout bounds one snapshot attempt (0: none).
	SnapshotTimeout time.Duration
	// StaleAfter: when the newest backup is older than this, the stale
	// event is sent (once, until a newer backup appears). 0 disables.
	StaleAfter time.Duration
	// RefreshInterval is how often the backup gauges are refreshed from
	// the store besides after each job (default 5m).
	RefreshInterval time.Duration
	// ShutdownTimeout bounds stopping: running jobs are cancelled, pending
	// notifications get what is left of it (default 30s).
	ShutdownTimeout time.Duration
	// Lock, when not nil, makes the agent run jobs only while it holds the
	// cluster's leader lock in etcd. Nil: this agent always runs them.
	Lock *LockConfig
	// Listen is the HTTP address of /metrics, /healthz, /readyz and
	// /status ("" disables the server). New binds it.
	Listen string
	// Notify configures webhooks.
	Notify NotifyConfig
	// Registry receives the agent's metrics and is served on /metrics (nil:
	// a new registry). Never the global default registry.
	Registry *prometheus.Registry
	// Systemd configures sd_notify (zero: off).
	Systemd Systemd
	// Clock is the time source (nil: RealClock).
	Clock Clock
	// Identity names this agent (lock holder, notifications).
	Identity string
	// Version is lifeboat's version (lifeboat_build_info, /status).
	Version string
}

// Agent runs the scheduled jobs. Create it with New; Run it once.
type Agent struct {
	cfg    Config
	lg     *slog.Logger
	clock  Clock
	m      *metrics
	reg    *prometheus.Registry
	jobs   []*job
	byName map[string]*job
	ln     net.Listener
	notif  *notifier
	lock   *leader
	start  time.Time

	runs  sync.WaitGroup // job runs in flight
	mu    sync.Mutex
	state backupState
	// drills are the drill records of the drills this agent ran.
	drills map[string]drill.Record
	// lastDrill is when the drill the gauges show ended.
	lastDrill time.Time
	stale     bool // the stale event was sent and no fresh backup seen since
	ready     atomic.Bool

	capt captureState
}

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

// RunRecord describes one job run.
type RunRecord struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Result   string    `json:"result"`
	Error    string    `json:"error,omitempty"`
	BackupID string    `json:"backup_id,omitempty"`
	Trigger  string    `json:"trigger"`
}

// backupState is what the last listing of the store showed.
type backupState struct {
	listed       bool
	at           time.Time
	err          string
	ok, broken   int
	locked       int
	newest       *repository.Manifest
	newestProven *repository.Manifest
	// drillUnknown are the listed backups whose last drill's verdict
	// cannot be read.
	drillUnknown []DrillProblem
}

// cronParser takes five fields with optional seconds, descriptors (@daily,
// @every 30m) and CRON_TZ=.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule is the one parser of cron schedules: the agent runs what it
// returns, and the configuration checks schedule.* with it.
func ParseSchedule(spec string) (cron.Schedule, error) { return cronParser.Parse(spec) }

// New checks cfg, registers the metrics, creates the etcd client of the
// lock and binds the HTTP listener; Run or RunOnce (once) releases them.
// lg receives the agent's logs (one line per job run, lock change,
// problem).
func New(cfg Config, lg *slog.Logger) (*Agent, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if cfg.Backups == nil {
		return nil, errors.New("agent: no backup store")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = cfg.Backups.Cluster
	}
	if cfg.Jitter < 0 {
		return nil, fmt.Errorf("agent: jitter %s: must not be negative", cfg.Jitter)
	}
	if cfg.SnapshotRetries < 0 {
		return nil, fmt.Errorf("agent: snapshot retries %d: must not be negative", cfg.SnapshotRetries)
	}
	if err := cfg.Notify.Validate(); err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.RetryBackoff <= 0 {
		cfg.RetryBackoff = prune.DefaultRetryBackoff
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = 5 * time.Minute
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 30 * time.Second
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.DrillHistory == nil {
		cfg.DrillHistory = drill.StoreHistory(cfg.Backups)
	}
	if cfg.Capture != nil && cfg.Snapshot == nil {
		return nil, errors.New("agent: capture needs the snapshot job (each generation starts from a fresh snapshot)")
	}
	if cfg.CaptureBackoff <= 0 {
		cfg.CaptureBackoff = time.Second
	}
	a := &Agent{cfg: cfg, lg: lg, clock: cfg.Clock, reg: cfg.Registry, byName: map[string]*job{}, drills: map[string]drill.Record{}}

	type candidate struct {
		name, spec, notifyOn string
		enabled              bool
		run                  func(context.Context) (string, error)
	}
	for _, c := range []candidate{
		{JobSnapshot, cfg.Schedules.Snapshot, EventSnapshotFailed, cfg.Snapshot != nil, a.snapshot},
		{JobPrune, cfg.Schedules.Prune, EventPruneFailed, cfg.Prune != nil, a.prune},
		{JobDrill, cfg.Schedules.Drill, EventDrillFailed, cfg.Drill != nil, a.drill},
	} {
		// Capture takes its snapshots through the snapshot job, scheduled
		// or not (then it runs only for capture).
		unscheduled := c.spec == "" && c.name == JobSnapshot && c.enabled && cfg.Capture != nil
		if c.spec == "" && !unscheduled {
			continue
		}
		if !c.enabled {
			lg.Warn("job has a schedule but is not available in this build; it does not run", "job", c.name, "schedule", c.spec)
			continue
		}
		var s cron.Schedule
		if !unscheduled {
			var err error
			if s, err = ParseSchedule(c.spec); err != nil {
				return nil, fmt.Errorf("agent: schedule of %s %q: %w", c.name, c.spec, err)
			}
		}
		j := &job{name: c.name, spec: c.spec, sched: s, run: c.run, notifyOn: c.notifyOn, freed: make(chan struct{})}
		a.jobs = append(a.jobs, j)
		a.byName[c.name] = j
	}
	names := make([]string, len(a.jobs))
	for i, j := range a.jobs {
		names[i] = j.name
	}
	m, err := newMetrics(cfg.Registry, names, cfg.Version)
	if err != nil {
		return nil, err
	}
	a.m = m
	if cfg.Lock == nil {
		m.leader.Set(1)
	}
	a.initCapture()
	a.notif = newNotifier(cfg.Notify, cfg.Cluster, cfg.Identity, cfg.Clock, m, lg)
	if cfg.Lock != nil {
		// The client connects lazily: this fails only on bad settings.
		l, err := newLeader(*cfg.Lock, cfg.Cluster, m, lg)
		if err != nil {
			return nil, fmt.Errorf("agent: leader lock: %w", err)
		}
		a.lock = l
	}
	if cfg.Listen != "" {
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			if a.lock != nil {
				a.lock.close()
			}
			return nil, fmt.Errorf("agent: listen on %s: %w", cfg.Listen, err)
		}
		a.ln = ln
	}
	return a, nil
}

// Addr is the HTTP server's address (nil without one).
func (a *Agent) Addr() net.Addr {
	if a.ln == nil {
		return nil
	}
	return a.ln.Addr()
}

// Registry is the registry the metrics are in.
func (a *Agent) Registry() *prometheus.Registry { return a.reg }

// Run runs the agent until ctx ends: the HTTP server, the leader lock, the
// schedules and the notifier. When ctx ends it takes no new work, cancels
// the running jobs (an upload is aborted, spool and scratch are removed),
// waits for them, releases the lock, sends what notifications it can in
// the rest of ShutdownTimeout and returns nil. It returns only after all
// its goroutines have ended, except when a job ignores cancellation beyond
// ShutdownTimeout: then it returns an error saying so.
func (a *Agent) Run(ctx context.Context) error {
	a.start = a.clock.Now()
	var bg sync.WaitGroup // everything but job runs

	// The notifier outlives ctx by the shutdown budget.
	notifyCtx, notifyCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer notifyCancel()
	bg.Go(func() { a.notif.run(notifyCtx) })

	var srv *http.Server
	if a.ln != nil {
		srv = &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slogErrorLog(a.lg)}
		bg.Go(func() {
			if err := srv.Serve(a.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				a.lg.Error("http server stopped", "err", err)
			}
		})
		a.lg.Info("serving /metrics /healthz /readyz /status", "addr", a.ln.Addr().String())
	}

	lockCtx, lockCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer lockCancel()
	var lockDone chan struct{}
	if a.lock != nil {
		lockDone = make(chan struct{})
		go func() { defer close(lockDone); a.lock.run(lockCtx, a.clock) }()
	}

	// Gauges from the store first, so that the first scrape knows the
	// newest backup even before any job ran (bounded: READY must not
	// wait for a slow store).
	ictx, icancel := context.WithTimeout(ctx, 15*time.Second)
	a.refresh(ictx)
	icancel()
	a.ready.Store(true)
	if err := sdNotify(a.cfg.Systemd.Socket, "READY=1"); err != nil {
		a.lg.Warn("systemd notify failed", "err", err)
	}
	if a.cfg.Systemd.Watchdog > 0 {
		bg.Go(func() { a.watchdog(ctx) })
	}

	var sched sync.WaitGroup
	for _, j := range a.jobs {
		if j.sched == nil {
			continue // runs for capture only
		}
		sched.Go(func() { a.schedule(ctx, j) })
	}
	if a.cfg.Capture != nil {
		// Under runs: shutdown waits for it as for a job, within
		// ShutdownTimeout, before the lock is released.
		a.runs.Go(func() { a.captureLoop(ctx) })
	}
	if a.cfg.RunAtStart {
		if j := a.byName[JobSnapshot]; j != nil {
			sched.Go(func() {
				if a.leaderCtx(ctx, a.lockWait()) != nil {
					a.trigger(ctx, j, "start")
				} else if ctx.Err() == nil {
					a.lg.Info("run at start: another agent holds the lock; it runs the jobs")
				}
			})
		}
	}
	sched.Go(func() { a.refreshLoop(ctx) })
	a.lg.Info("agent started", "cluster", a.cfg.Cluster, "store", a.cfg.Backups.Store.String(), "jobs", len(a.jobs), "lock", a.cfg.Lock != nil)

	<-ctx.Done()
	a.lg.Info("shutting down: no new runs, cancelling running jobs")
	if err := sdNotify(a.cfg.Systemd.Socket, "STOPPING=1"); err != nil {
		a.lg.Warn("systemd notify failed", "err", err)
	}
	// Shutdown is bounded in real time, whatever the clock.
	deadline := time.Now().Add(a.cfg.ShutdownTimeout)
	sched.Wait()
	var runErr error
	if !waitTimeout(&a.runs, a.cfg.ShutdownTimeout) {
		runErr = fmt.Errorf("agent: running jobs did not stop within %s", a.cfg.ShutdownTimeout)
	}
	// Jobs have stopped (or are abandoned): release the lock.
	lockCancel()
	if lockDone != nil {
		select {
		case <-lockDone:
		case <-time.After(max(time.Until(deadline), time.Second)):
			// Stuck talking to an unreachable etcd: closing the client
			// unblocks it; the lease expires on its own.
		}
		a.lock.close()
		<-lockDone
	}
	a.notif.close()
	timer := time.AfterFunc(max(time.Until(deadline), 0), notifyCancel)
	defer timer.Stop()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), max(time.Until(deadline), time.Second))
		srv.Shutdown(sctx)
		cancel()
	}
	bg.Wait()
	a.lg.Info("agent stopped")
	return runErr
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
	if err == nil {
		rec.Result = ResultSuccess
		a.m.runs.WithLabelValues(j.name, ResultSuccess).Inc()
		a.m.lastSuccess.WithLabelValues(j.name).Set(unixSeconds(rec.End))
		a.lg.Info("job succeeded", "job", j.name, "backup_id", id, "seconds", round(dur))
	} else {
		rec.Result, rec.Error = ResultFailure, err.Error()
		a.m.runs.WithLabelValues(j.name, ResultFailure).Inc()
		if jctx.Err() != nil {
			// Shutdown or a lost lock: not a failure of the job itself.
			a.lg.Warn("job cancelled", "job", j.name, "backup_id", id, "seconds", round(dur), "err", err)
		} else {
			a.lg.Error("job failed", "job", j.name, "backup_id", id, "seconds", round(dur), "err", err)
			// A drill with nothing to drill proves nothing either way;
			// the stale event covers a store without backups.
			// A drill that reached no verdict is no drill failure either.
			var runErr *drillRunError
			if !(j.name == JobDrill && (errors.Is(err, repository.ErrNoBackups) || errors.As(err, &runErr))) {
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
	}
	return err
}

// snapshot runs the snapshot job, retrying failed attempts with backoff.
func (a *Agent) snapshot(ctx context.Context) (string, error) {
	m, err := a.takeSnapshot(ctx)
	if err != nil {
		return "", err
	}
	a.offerRollover(m)
	return m.ID, nil
}

// takeSnapshot is snapshot returning the committed backup's manifest.
func (a *Agent) takeSnapshot(ctx context.Context) (*repository.Manifest, error) {
	return a.takeSnapshotRetry(ctx, true)
}

// takeSnapshotRetry is takeSnapshot; with !retryExists, a backup already
// stored at this revision and second (backup.ErrExists) is returned at
// once instead of retried (capture adopts that one).
func (a *Agent) takeSnapshotRetry(ctx context.Context, retryExists bool) (*repository.Manifest, error) {
	sj := *a.cfg.Snapshot
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
			return m, nil
		}
		if ctx.Err() != nil || attempt >= a.cfg.SnapshotRetries || (!retryExists && errors.Is(err, backup.ErrExists)) {
			if attempt > 0 {
				err = fmt.Errorf("after %d attempts: %w", attempt+1, err)
			}
			return nil, err
		}
		a.lg.Warn("snapshot failed; retrying", "attempt", attempt+1, "of", a.cfg.SnapshotRetries+1, "retry_in", delay.String(), "err", err)
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
	return "", err
}

// drill runs the drill job and records its outcome: the verdict goes to
// the drill gauges, and the job fails when the drill did not pass or its
// report could not be stored.
func (a *Agent) drill(ctx context.Context) (string, error) {
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

// refreshLoop refreshes the backup gauges every RefreshInterval.
func (a *Agent) refreshLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.RefreshInterval):
			a.refresh(ctx)
		}
	}
}

// refresh lists the store and updates the backup gauges, the last-success
// times it can learn from the store, and the stale state.
func (a *Agent) refresh(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	now := a.clock.Now()
	l, err := a.cfg.Backups.List(ctx)
	if err != nil && ctx.Err() != nil {
		return // cut short (shutdown): nothing learnt, nothing changes
	}
	if err != nil {
		a.m.storeUp.Set(0)
		a.mu.Lock()
		a.state.err = err.Error()
		a.mu.Unlock()
		if ctx.Err() == nil {
			a.lg.Warn("cannot list backups", "err", err)
		}
		return
	}
	a.m.storeUp.Set(1)
	a.refreshWindows(ctx, l)
	drills, derr := a.drillRecords(ctx)
	if derr != nil && ctx.Err() != nil {
		return // cut short: an unread drill history is not "nothing proven"
	}
	if derr != nil {
		a.lg.Warn("cannot read the drill history; proven backups unknown", "err", derr)
	}
	st := backupState{listed: true, at: now, broken: len(l.Unreadable)}
	for _, e := range l.Backups {
		if e.State != repository.StateOK {
			st.broken++
			continue
		}
		if prune.Locked(e.Manifest, now) {
			st.locked++
		} else {
			st.ok++
		}
		if st.newest == nil {
			st.newest = e.Manifest
		}
		r := drills[e.Manifest.ID]
		if st.newestProven == nil && r.Passed && !r.Unknown {
			st.newestProven = e.Manifest
		}
		if r.Unknown {
			st.drillUnknown = append(st.drillUnknown, DrillProblem{BackupID: e.Manifest.ID, Error: r.Err})
		}
	}
	a.m.backups.WithLabelValues(stateOK).Set(float64(st.ok))
	a.m.backups.WithLabelValues(stateLocked).Set(float64(st.locked))
	a.m.backups.WithLabelValues(stateBroken).Set(float64(st.broken))
	a.m.newest.Set(unixOrZero(st.newest))
	a.m.newestProven.Set(unixOrZero(st.newestProven))

	// What the store proves about the last successes (another agent's,
	// or before a restart): never move a gauge backwards.
	if j := a.byName[JobSnapshot]; j != nil && st.newest != nil {
		a.learnSuccess(j, st.newest.CreatedAt.Add(time.Duration(st.newest.DurationSeconds*float64(time.Second))))
	}
	var newestDrill drill.Record
	var newestPass time.Time
	for _, r := range drills {
		if r.At.After(newestDrill.At) {
			newestDrill = r
		}
		if r.Passed && r.At.After(newestPass) {
			newestPass = r.At
		}
	}
	if j := a.byName[JobDrill]; j != nil && !newestPass.IsZero() {
		a.learnSuccess(j, newestPass)
	}
	a.mu.Lock()
	a.state = st
	if newestDrill.At.After(a.lastDrill) {
		a.lastDrill = newestDrill.At
		a.m.drillTime.Set(unixSeconds(newestDrill.At))
		if newestDrill.Unknown {
			// No verdict is known: never an older one instead.
			a.m.drillResult.Unset()
		} else {
			a.m.drillResult.Set(b2f(newestDrill.Passed))
		}
	}
	a.mu.Unlock()
	a.checkStale(now, st)
}

func (a *Agent) learnSuccess(j *job, t time.Time) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if t.After(j.success) {
		j.success = t
		a.m.lastSuccess.WithLabelValues(j.name).Set(unixSeconds(t))
	}
}

// checkStale sends the stale event when the newest backup is older than
// StaleAfter (or there is none and the agent has been up that long): once,
// until a fresh backup appears. Only the leader sends it.
func (a *Agent) checkStale(now time.Time, st backupState) {
	if a.cfg.StaleAfter <= 0 || a.leaderCtx(context.Background(), 0) == nil {
		return
	}
	var stale bool
	var msg, id string
	if st.newest == nil {
		stale = now.Sub(a.start) >= a.cfg.StaleAfter
		msg = fmt.Sprintf("no backup in the store after %s", a.cfg.StaleAfter)
	} else {
		age := now.Sub(st.newest.CreatedAt)
		stale = age > a.cfg.StaleAfter
		id = st.newest.ID
		msg = fmt.Sprintf("the newest backup %s is %s old (stale after %s)", id, age.Truncate(time.Second), a.cfg.StaleAfter)
	}
	a.mu.Lock()
	send := stale && !a.stale
	a.stale = stale
	a.mu.Unlock()
	if send {
		a.lg.Warn("backups are stale", "backup_id", id, "err", msg)
		a.notif.notify(event{kind: EventStale, backupID: id, err: msg, at: now})
	}
}

// watchdog pings systemd's watchdog at half its interval until ctx ends.
func (a *Agent) watchdog(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.clock.After(a.cfg.Systemd.Watchdog / 2):
			if err := sdNotify(a.cfg.Systemd.Socket, "WATCHDOG=1"); err != nil {
				a.lg.Warn("systemd watchdog ping failed", "err", err)
			}
		}
	}
}

// RunOnce runs one cycle: snapshot, prune and drill, each when it has a
// schedule, in that order, then sends the notifications. With a lock it
// first waits (up to TTL plus 5s) for the lock and fails when another
// agent holds it. It returns an error when any job failed.
func (a *Agent) RunOnce(ctx context.Context) error {
	if a.cfg.Capture != nil {
		if a.lock != nil {
			a.lock.close()
		}
		if a.ln != nil {
			a.ln.Close()
		}
		return ErrCaptureOnce
	}
	a.start = a.clock.Now()
	notifyCtx, notifyCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer notifyCancel()
	var bg sync.WaitGroup
	bg.Go(func() { a.notif.run(notifyCtx) })
	defer func() {
		a.notif.close()
		t := time.AfterFunc(a.cfg.ShutdownTimeout, notifyCancel)
		bg.Wait()
		t.Stop()
	}()

	if a.lock != nil {
		l := a.lock
		lockCtx, lockCancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); l.run(lockCtx, a.clock) }()
		defer func() {
			lockCancel()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
			}
			l.close()
			<-done
		}()
		if a.leaderCtx(ctx, a.lockWait()) == nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			holder, _ := l.holder(ctx)
			return fmt.Errorf("another agent (%s) holds the lock %s%s: not running", orNone(holder), LockPrefix, a.cfg.Cluster)
		}
	}
	a.refresh(ctx)
	var errs []error
	for _, j := range a.jobs {
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
		if err := a.execute(ctx, j, "once"); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", j.name, err))
		}
	}
	return errors.Join(errs...)
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func unixOrZero(m *repository.Manifest) float64 {
	if m == nil {
		return 0
	}
	return unixSeconds(m.CreatedAt)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func round(d time.Duration) string { return fmt.Sprintf("%.2f", d.Seconds()) }

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
