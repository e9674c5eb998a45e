package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/scrub"
)

// Copy is one copy store the agent keeps in step with the primary.
type Copy struct {
	// Name labels the copy (the store label of the copy metrics).
	Name string
	// Job copies to it (From the primary, To the copy); the agent sets
	// its clock.
	Job replica.Job
	// Prune, when not nil, is the copy's own prune, run by the prune job
	// after the primary's with the copy's own drill history.
	Prune *prune.Job
	// Drill, when not nil, drills a backup of the copy (its report is
	// written to the copy): drill.store names it, or alternates.
	Drill DrillFunc
	// Scrub, when not nil, scrubs the copy after the primary (the scrub
	// job, scrub.schedule).
	Scrub *scrub.Job
}

// DrillStorePrimary and DrillStoreAlternate are Config.DrillStore's
// values besides a copy's name.
const (
	DrillStorePrimary   = "primary"
	DrillStoreAlternate = "alternate"
)

// Bounds of a failing copy's retries: the first delay, doubling up to
// CopyInterval.
const copyFirstBackoff = 5 * time.Second

// copier is one copy's background loop and its state.
type copier struct {
	c       Copy
	kick    chan struct{} // a backup committed: copy now
	running atomic.Bool
	// indexer writes the copy's index after a run that copied something
	// (the fleet reads a copy store's clusters cold through it too).
	indexer *repository.Indexer

	mu   sync.Mutex
	last CopyStatus
}

// CopyStatus is one copy's state in /status.
type CopyStatus struct {
	Name        string     `json:"name"`
	Running     bool       `json:"running"`
	LastRun     *time.Time `json:"last_run,omitempty"`
	LastSuccess *time.Time `json:"last_success,omitempty"`
	// LastError is the last run's error ("" when it succeeded).
	LastError string `json:"last_error,omitempty"`
	// Backups is how many intact backups the copy held after the last
	// run; RecoveryPoint and ChangesPoint what it alone restores to.
	Backups       int        `json:"backups"`
	RecoveryPoint *time.Time `json:"recovery_point,omitempty"`
	ChangesPoint  *time.Time `json:"changes_point,omitempty"`
}

// record keeps a run's outcome for /status.
func (c *copier) record(at time.Time, res *replica.Result, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.last.LastRun, c.last.LastError = &at, ""
	if err != nil {
		c.last.LastError = err.Error()
	} else {
		c.last.LastSuccess = &at
	}
	if res != nil && !res.RecoveryPoint.IsZero() {
		rp, cp := res.RecoveryPoint, res.ChangesPoint
		c.last.Backups, c.last.RecoveryPoint, c.last.ChangesPoint = res.Backups, &rp, &cp
	}
}

// copyStatus is every copy's state.
func (a *Agent) copyStatus() []CopyStatus {
	var out []CopyStatus
	for _, c := range a.copiers {
		c.mu.Lock()
		st := c.last
		c.mu.Unlock()
		st.Name, st.Running = c.c.Name, c.running.Load()
		out = append(out, st)
	}
	return out
}

// copyMetrics are the copies' metrics, by store (a copy's name).
type copyMetrics struct {
	lastSuccess   *prometheus.GaugeVec
	failures      *prometheus.CounterVec
	recoveryPoint *prometheus.GaugeVec
	bytes         *prometheus.CounterVec
	drillTime     *prometheus.GaugeVec
	drillResult   *prometheus.GaugeVec
}

// copyMetricDefs are the copies' metrics, one row a metric (see
// metricDef).
var copyMetricDefs = []metricDef[copyMetrics]{
	{field: func(m *copyMetrics) any { return &m.lastSuccess }, name: "lifeboat_copy_last_success_timestamp_seconds", labels: []string{"store"},
		help: "When a copy last caught up with the primary without error (Unix time; 0: not since start)."},
	{field: func(m *copyMetrics) any { return &m.failures }, name: "lifeboat_copy_failures_total", labels: []string{"store"},
		help: "Copy runs that failed (retried with backoff)."},
	{field: func(m *copyMetrics) any { return &m.recoveryPoint }, name: "lifeboat_copy_recovery_point_timestamp_seconds", labels: []string{"store", "kind"},
		help: "The newest point a copy alone restores to (Unix time): kind backup from its newest backup, kind changes with its change windows (0: none yet)."},
	{field: func(m *copyMetrics) any { return &m.bytes }, name: "lifeboat_copy_bytes_total", labels: []string{"store"},
		help: "Bytes written to a copy."},
	{field: func(m *copyMetrics) any { return &m.drillTime }, name: "lifeboat_copy_drill_last_timestamp_seconds", labels: []string{"store"},
		help: "When the last drill of a copy ended, whatever its verdict (Unix time; 0: none by this agent). The primary's drills are lifeboat_drill_*."},
	{field: func(m *copyMetrics) any { return &m.drillResult }, name: "lifeboat_copy_drill_last_result", labels: []string{"store"},
		help: "Verdict of the last drill of a copy by this agent: 1 passed, 0 failed (absent until one ran)."},
}

func newCopyMetrics(reg prometheus.Registerer, copies []Copy) (*copyMetrics, error) {
	m := &copyMetrics{}
	if err := registerMetrics(reg, m, copyMetricDefs); err != nil {
		return nil, err
	}
	for _, c := range copies {
		m.lastSuccess.WithLabelValues(c.Name)
		m.failures.WithLabelValues(c.Name)
		m.bytes.WithLabelValues(c.Name)
		m.recoveryPoint.WithLabelValues(c.Name, "backup")
		m.recoveryPoint.WithLabelValues(c.Name, "changes")
		m.drillTime.WithLabelValues(c.Name)
	}
	return m, nil
}

// initCopies makes a copier per copy; newCopyMetrics registers theirs.
func (a *Agent) initCopies() error {
	if a.cfg.CopyInterval <= 0 {
		a.cfg.CopyInterval = time.Minute
	}
	for _, c := range a.cfg.Copies {
		a.copiers = append(a.copiers, &copier{c: c, kick: make(chan struct{}, 1)})
	}
	m, err := newCopyMetrics(a.reg, a.cfg.Copies)
	a.cm = m
	return err
}

// kickCopies asks every copy to catch up now (a backup committed); the
// caller never waits on a copy.
func (a *Agent) kickCopies() {
	for _, c := range a.copiers {
		select {
		case c.kick <- struct{}{}:
		default: // one pending kick is enough
		}
	}
}

// copyLoop keeps one copy in step until ctx ends: at each kick and every
// CopyInterval while this agent leads, and after a failure again after a
// backoff (5s, doubling up to CopyInterval).
func (a *Agent) copyLoop(ctx context.Context, c *copier) {
	wait := time.Duration(0) // at start: catch up at once
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.kick:
		case <-a.clock.After(wait):
		}
		if a.leaderCtx(ctx, 0) == nil {
			wait = a.cfg.CopyInterval
			continue
		}
		err := a.copyOnce(ctx, c)
		if err != nil && ctx.Err() == nil && onlyDamage(err) {
			// Not retried sooner: running again does not repair it.
			a.lg.Error("copy caught up except for damaged objects of the primary", "store", c.c.Name, "err", err)
			wait = a.cfg.CopyInterval
			continue
		}
		if err != nil && ctx.Err() == nil {
			if wait < copyFirstBackoff || wait >= a.cfg.CopyInterval {
				wait = copyFirstBackoff
			} else {
				wait = min(wait*2, a.cfg.CopyInterval)
			}
			a.lg.Warn("copy failed; retrying", "store", c.c.Name, "retry_in_seconds", logfield.Seconds(wait), "err", err)
			continue
		}
		wait = a.cfg.CopyInterval
	}
}

// copyOnce runs one copy under the leadership context and records it.
func (a *Agent) copyOnce(ctx context.Context, c *copier) error {
	lctx := a.leaderCtx(ctx, 0)
	if lctx == nil {
		return nil
	}
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(lctx, cancel)
	defer stop()
	c.running.Store(true)
	defer c.running.Store(false)

	job := c.c.Job
	job.Now = a.clock.Now
	to := *job.To
	to.Store = countingStore{Store: to.Store, c: a.cm.bytes.WithLabelValues(c.c.Name)}
	job.To = &to
	res, err := replica.Run(jctx, job, a.lg.With("job", "copy"))
	c.record(a.clock.Now(), res, err)
	if res != nil && !res.RecoveryPoint.IsZero() {
		a.cm.recoveryPoint.WithLabelValues(c.c.Name, "backup").Set(unixSeconds(res.RecoveryPoint))
		a.cm.recoveryPoint.WithLabelValues(c.c.Name, "changes").Set(unixSeconds(res.ChangesPoint))
	}
	if err != nil && !onlyDamage(err) {
		if jctx.Err() == nil {
			a.cm.failures.WithLabelValues(c.c.Name).Inc()
		}
		return err
	}
	// A run that copied everything but the primary's damaged objects is
	// caught up as far as it can be: the damage alerts on the primary
	// (LifeboatCaptureWindowBroken, LifeboatBrokenBackups), not as a
	// failing copy; the error says which objects (status, log).
	a.cm.lastSuccess.WithLabelValues(c.c.Name).Set(unixSeconds(a.clock.Now()))
	if err != nil {
		return err
	}
	if n := len(res.Copied); n > 0 {
		a.lg.Info("copy caught up", "store", c.c.Name, "objects", n, "bytes", res.Bytes, "backups", res.Backups)
		a.indexCopy(jctx, c)
	}
	return nil
}

// indexCopy writes the copy's index, signed with the agent's key; a
// failure is logged.
func (a *Agent) indexCopy(ctx context.Context, c *copier) {
	if c.indexer == nil {
		to := c.c.Job.To
		c.indexer = &repository.Indexer{Repo: &repository.Repo{Store: to.Store, Cluster: to.Cluster, Signer: a.cfg.Backups.Signer}, Writer: a.cfg.Identity}
	}
	ctx, cancel := context.WithTimeout(ctx, indexTimeout)
	defer cancel()
	if _, err := c.indexer.Write(ctx, a.clock.Now()); err != nil && ctx.Err() == nil {
		a.lg.Warn("cannot write the copy's backup index; the fleet lists it in full", "store", c.c.Name, "err", err)
	}
}

// copyAll runs every copy once, in turn (agent --once).
func (a *Agent) copyAll(ctx context.Context) error {
	var errs []error
	for _, c := range a.copiers {
		if err := a.copyOnce(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// pruneCopies prunes each copy that has a prune job, by its own policy
// and its own drill history (its newest proven backup is kept in it).
func (a *Agent) pruneCopies(ctx context.Context) error {
	var errs []error
	for _, c := range a.copiers {
		if c.c.Prune == nil {
			continue
		}
		pj := *c.c.Prune
		pj.Now = a.clock.Now
		pj.SnapshotRunning = c.running.Load // a copy in flight has objects without manifests
		h, err := drill.StoreHistory(pj.Backups)(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("prune of copy %s not run: read its drill history: %w", c.c.Name, err))
			continue
		}
		pj.DrillPassed, pj.DrillUnknown = map[string]bool{}, map[string]bool{}
		for id, r := range h {
			pj.DrillPassed[id] = r.Passed
			pj.DrillUnknown[id] = r.Unknown
		}
		res, err := prune.Run(ctx, pj, a.lg.With("store", c.c.Name))
		if res != nil {
			a.m.deleted.Add(float64(len(res.Deleted)))
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("prune of copy %s: %w", c.c.Name, err))
		}
	}
	return errors.Join(errs...)
}

// drillStore is the store the next drill proves: DrillStore, or with
// alternate the store (primary or a drillable copy) whose newest drill is
// the oldest, never drilled first: every store is proven in turn, across
// restarts and agent --once runs alike (the reports are in the stores).
// nil is the primary.
func (a *Agent) drillStore(ctx context.Context) *copier {
	switch name := a.cfg.DrillStore; name {
	case "", DrillStorePrimary:
		return nil
	case DrillStoreAlternate:
		newest := func(h map[string]drill.Record) time.Time {
			var t time.Time
			for _, r := range h {
				if r.At.After(t) {
					t = r.At
				}
			}
			return t
		}
		var pick *copier
		oldest := time.Time{}
		if h, err := a.drillRecords(ctx); err == nil {
			oldest = newest(h)
		}
		for _, c := range a.copiers {
			if c.c.Drill == nil {
				continue
			}
			h, err := drill.StoreHistory(c.c.Job.To)(ctx)
			if err != nil {
				a.lg.Warn("drill: cannot read a copy's drill reports; drilling it now", "store", c.c.Name, "err", err)
				return c
			}
			if t := newest(h); t.Before(oldest) {
				pick, oldest = c, t
			}
		}
		return pick
	default:
		for _, c := range a.copiers {
			if c.c.Name == name && c.c.Drill != nil {
				return c
			}
		}
		return nil
	}
}

// drillCopy drills copy c: its verdict goes to the copy's drill metrics
// (the primary's drill gauges and proven backups are the primary's).
func (a *Agent) drillCopy(ctx context.Context, c *copier) (string, error) {
	out, err := c.c.Drill(ctx)
	if ctx.Err() != nil && (out == nil || !out.Passed) {
		if err == nil {
			err = ctx.Err()
		}
		return outcomeID(out), err
	}
	if out == nil || out.RunError {
		a.m.drillErrors.Inc()
		a.m.drillErrTime.Set(unixSeconds(a.clock.Now()))
		if err == nil {
			err = errors.New("no verdict")
			if out != nil && out.Error != "" {
				err = errors.New(out.Error)
			}
		}
		return outcomeID(out), &drillRunError{err: fmt.Errorf("copy %s: %w", c.c.Name, err)}
	}
	a.cm.drillTime.WithLabelValues(c.c.Name).Set(unixSeconds(a.clock.Now()))
	a.cm.drillResult.WithLabelValues(c.c.Name).Set(b2f(out.Passed))
	switch {
	case err != nil:
		return outcomeID(out), fmt.Errorf("copy %s: %w", c.c.Name, err)
	case !out.Passed:
		return outcomeID(out), fmt.Errorf("drill of backup %s in copy %s failed: %s", orNone(out.BackupID), c.c.Name, out.Error)
	}
	a.lg.Info("drill of a copy passed", "store", c.c.Name, "backup_id", out.BackupID)
	return out.BackupID, nil
}

// onlyDamage reports whether a copy run's error is only the primary's
// damaged objects it skipped (replica.ErrDamaged, every other object
// copied).
func onlyDamage(err error) bool {
	return errors.Is(err, replica.ErrDamaged)
}
