package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/kubeobjects"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/scrub"
)

// Schedules are cron expressions (robfig/cron: five fields with optional
// seconds, descriptors like @every 30m or @daily, CRON_TZ=Zone prefix). An
// empty schedule disables that job.
type Schedules struct {
	Snapshot string
	Prune    string
	Drill    string
	// Scrub is scrub.schedule: the primary's scrub, then each copy's.
	Scrub string
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
	// Scrub, when not nil, is the primary's scrub (Schedules.Scrub); the
	// agent sets its clock. Each copy's is Copy.Scrub.
	Scrub *scrub.Job
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
	// Copies are the copy stores, each caught up in the background after
	// every committed backup and every CopyInterval (default 1m) while
	// this agent leads; the primary never waits on them.
	Copies       []Copy
	CopyInterval time.Duration
	// DrillStore is the store the drill job proves: "" or
	// DrillStorePrimary, a copy's name, or DrillStoreAlternate.
	DrillStore string
	// Kube, when not nil, mirrors the store into the Kubernetes API
	// (EtcdBackup objects, events) after every job end; a failure is
	// logged and counted, never a job's failure (kube.go).
	Kube *kubeobjects.Client
	// StatusEvery is how often the daemon writes its status document
	// into the store besides at every job end (default 1m; see
	// statusdoc.go).
	StatusEvery time.Duration
	// CaptureInterval is capture.interval, recorded in the status
	// document (capture itself gets it through Capture).
	CaptureInterval time.Duration
}

// Agent runs the scheduled jobs. Create it with New; Run it once.
type Agent struct {
	// unchangedSince is the backup the last snapshot run found the
	// cluster unchanged since (nil after a run that stored one).
	unchangedSince atomic.Pointer[unchanged]

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

	// once is set by RunOnce: the status document says so and is written
	// at each job end directly.
	once bool
	// statusKick asks the status loop for a write (a job ended).
	statusKick chan struct{}
	// indexDue is set when a job ended: the next status write writes the
	// cluster's index first (indexer; statusdoc.go).
	indexDue atomic.Bool
	indexer  *repository.Indexer

	copiers []*copier
	cm      *copyMetrics
	sm      *scrubMetrics // nil without a scheduled scrub
}

// RunRecord describes one job run.
type RunRecord struct {
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	Result   string    `json:"result"`
	Error    string    `json:"error,omitempty"`
	BackupID string    `json:"backup_id,omitempty"`
	Trigger  string    `json:"trigger"`
	// Unchanged: a snapshot run that found the cluster unchanged since
	// backup BackupID and stored nothing (a success).
	Unchanged bool `json:"unchanged,omitempty"`
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
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, lg: lg, clock: cfg.Clock, reg: cfg.Registry, byName: map[string]*job{}, drills: map[string]drill.Record{}, statusKick: make(chan struct{}, 1)}
	if err := a.addJobs(); err != nil {
		return nil, err
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
	if err := a.initCopies(); err != nil {
		return nil, err
	}
	if err := a.initScrub(); err != nil {
		return nil, err
	}
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

// withDefaults checks cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Backups == nil {
		return cfg, errors.New("agent: no backup store")
	}
	if cfg.Cluster == "" {
		cfg.Cluster = cfg.Backups.Cluster
	}
	if cfg.Jitter < 0 {
		return cfg, fmt.Errorf("agent: jitter %s: must not be negative", cfg.Jitter)
	}
	if cfg.SnapshotRetries < 0 {
		return cfg, fmt.Errorf("agent: snapshot retries %d: must not be negative", cfg.SnapshotRetries)
	}
	if err := cfg.Notify.Validate(); err != nil {
		return cfg, fmt.Errorf("agent: %w", err)
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
		return cfg, errors.New("agent: capture needs the snapshot job (each generation starts from a fresh snapshot)")
	}
	if cfg.CaptureBackoff <= 0 {
		cfg.CaptureBackoff = time.Second
	}
	if cfg.StatusEvery <= 0 {
		cfg.StatusEvery = time.Minute
	}
	return cfg, nil
}

// addJobs makes the scheduled jobs: each enabled job with a schedule
// (and the snapshot job for capture, scheduled or not).
func (a *Agent) addJobs() error {
	type candidate struct {
		name, spec, notifyOn string
		enabled              bool
		run                  func(context.Context) (string, error)
	}
	for _, c := range []candidate{
		{JobSnapshot, a.cfg.Schedules.Snapshot, EventSnapshotFailed, a.cfg.Snapshot != nil, a.snapshot},
		{JobPrune, a.cfg.Schedules.Prune, EventPruneFailed, a.cfg.Prune != nil, a.prune},
		{JobDrill, a.cfg.Schedules.Drill, EventDrillFailed, a.cfg.Drill != nil, a.drill},
		// Damage is the scrub's alert (LifeboatScrubFoundDamage), not a
		// webhook event of its own yet.
		{JobScrub, a.cfg.Schedules.Scrub, "", a.cfg.Scrub != nil, a.scrubRun},
	} {
		// Capture takes its snapshots through the snapshot job, scheduled
		// or not (then it runs only for capture).
		unscheduled := c.spec == "" && c.name == JobSnapshot && c.enabled && a.cfg.Capture != nil
		if c.spec == "" && !unscheduled {
			continue
		}
		if !c.enabled {
			a.lg.Warn("job has a schedule but is not available in this build; it does not run", "job", c.name, "schedule", c.spec)
			continue
		}
		var s cron.Schedule
		if !unscheduled {
			var err error
			if s, err = ParseSchedule(c.spec); err != nil {
				return fmt.Errorf("agent: schedule of %s %q: %w", c.name, c.spec, err)
			}
		}
		j := &job{name: c.name, spec: c.spec, sched: s, run: c.run, notifyOn: c.notifyOn, freed: make(chan struct{})}
		a.jobs = append(a.jobs, j)
		a.byName[c.name] = j
	}
	return nil
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
	srv := a.serveHTTP(&bg)

	lockCtx, lockCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer lockCancel()
	lockDone := a.runLock(lockCtx)

	a.becomeReady(ctx, &bg)
	var sched sync.WaitGroup
	a.startJobs(ctx, &sched)

	<-ctx.Done()
	return a.shutdown(&sched, &bg, srv, lockCancel, lockDone, notifyCancel)
}

// serveHTTP serves /metrics, /healthz, /readyz and /status on the
// listener, if any, under bg; the server is returned for shutdown.
func (a *Agent) serveHTTP(bg *sync.WaitGroup) *http.Server {
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
	return srv
}

// runLock runs the leader lock until lockCtx ends; the channel is closed
// when it has (nil without a lock).
func (a *Agent) runLock(lockCtx context.Context) chan struct{} {
	var lockDone chan struct{}
	if a.lock != nil {
		lockDone = make(chan struct{})
		go func() { defer close(lockDone); a.lock.run(lockCtx, a.clock) }()
	}
	return lockDone
}

// becomeReady refreshes the gauges from the store, reports READY and
// starts the systemd watchdog under bg.
func (a *Agent) becomeReady(ctx context.Context, bg *sync.WaitGroup) {
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
}

// startJobs starts the schedules, the refresh loop and the run at start
// under sched, and capture and the copies under the job runs.
func (a *Agent) startJobs(ctx context.Context, sched *sync.WaitGroup) {
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
	for _, c := range a.copiers {
		a.runs.Go(func() { a.copyLoop(ctx, c) })
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
	sched.Go(func() { a.statusLoop(ctx) })
	a.lg.Info("agent started", "cluster", a.cfg.Cluster, "store", a.cfg.Backups.Store.String(), "jobs", len(a.jobs), "lock", a.cfg.Lock != nil)
}

// shutdown stops: no new runs, the running ones cancelled and awaited
// (within ShutdownTimeout), then the lock released, the notifications
// sent with what is left of the budget and the HTTP server closed.
func (a *Agent) shutdown(sched, bg *sync.WaitGroup, srv *http.Server, lockCancel context.CancelFunc, lockDone chan struct{}, notifyCancel context.CancelFunc) error {
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
	a.start, a.once = a.clock.Now(), true
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
	if ctx.Err() == nil {
		errs = append(errs, a.copyAll(ctx))
		a.writeStatus(ctx) // the cycle's end, copies included
	}
	return errors.Join(errs...)
}
