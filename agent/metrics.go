package agent

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/lifeboat-dev/lifeboat/capture"
)

// JobLabel names the label that says which job a series is about. It is
// not "job": Prometheus attaches its own job label to every scraped
// series (a scraped "job" becomes "exported_job"), and the Pushgateway
// client refuses metrics with a job label outright. kube-state-metrics
// solves the same clash with job_name.
const JobLabel = "job_name"

// Job names: the values of JobLabel.
const (
	JobSnapshot = "snapshot"
	JobPrune    = "prune"
	JobDrill    = "drill"
)

// Run results: the values of the result label of lifeboat_job_runs_total.
const (
	ResultSuccess = "success"
	ResultFailure = "failure"
	ResultSkipped = "skipped"
)

// Drill phases: the values of the phase label of
// lifeboat_drill_phase_duration_seconds, in the order a drill runs them.
// (verify, the structural check of the restored file, runs alongside
// restore and is reported as the time it went on after restore ended.)
var DrillPhases = []string{"fetch", "decode", "restore", "verify", "replay", "boot", "checks"}

// Backup states: the values of the state label of lifeboat_backups.
const (
	stateOK     = "ok"
	stateBroken = "broken"
	stateLocked = "locked"
)

// NewRegistry returns a registry with the Go runtime and process
// collectors, for a long-running agent. (agent --once leaves them out:
// pushed or textfile metrics of a short-lived process would mislead, and
// node_exporter exports its own go_ series.)
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// metrics are the agent's Prometheus metrics. Every label value comes from
// a fixed set (jobs, results, phases, states): never a backup id, key or
// error text.
type metrics struct {
	lastSuccess  *prometheus.GaugeVec
	runs         *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	snapSize     *prometheus.GaugeVec
	snapRevision prometheus.Gauge
	hashKVErrors prometheus.Counter
	backups      *prometheus.GaugeVec
	newest       prometheus.Gauge
	newestProven prometheus.Gauge
	drillResult  *optionalGauge
	drillTime    prometheus.Gauge
	drillPhase   *prometheus.GaugeVec
	drillRecover *optionalGauge
	drillErrors  prometheus.Counter
	drillErrTime prometheus.Gauge
	deleted      prometheus.Counter
	uploadBytes  prometheus.Counter
	leader       prometheus.Gauge
	storeUp      prometheus.Gauge
	notifies     *prometheus.CounterVec
	buildInfo    *prometheus.GaugeVec

	// The capture job's (capture.go): exported whether capture is on or
	// not, so that every agent exports one set of metrics.
	captureEnabled  prometheus.Gauge
	captureUp       prometheus.Gauge
	captureRevision prometheus.Gauge
	captureRecovery prometheus.Gauge
	captureLag      prometheus.GaugeFunc
	captureGaps     *prometheus.CounterVec
	captureRestarts prometheus.Counter
	captureWindows  prometheus.Gauge // windows with a problem (refreshWindows)
	// captureStats are the capture job's counters (every run's).
	captureStats *capture.Stats
	// lag computes lifeboat_capture_lag_seconds at scrape (NaN when nil).
	lag atomic.Pointer[func() float64]
}

// newMetrics creates the metrics, registers them with reg and creates the
// series of every enabled job so that they exist (at 0) from the first
// scrape.
func newMetrics(reg prometheus.Registerer, jobs []string, version string) (*metrics, error) {
	m := &metrics{
		lastSuccess: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lifeboat_job_last_success_timestamp_seconds",
			Help: "When a job last succeeded (Unix time; 0: not since start and not known from the store).",
		}, []string{JobLabel}),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lifeboat_job_runs_total",
			Help: "Job runs by result: success, failure, or skipped (the previous run was still going).",
		}, []string{JobLabel, "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lifeboat_job_duration_seconds",
			Help:    "How long job runs took (retries of a snapshot included).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}, []string{JobLabel}),
		snapSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lifeboat_snapshot_size_bytes",
			Help: "Size of the last snapshot this agent stored: raw (the etcd database) or stored (after compression and encryption).",
		}, []string{"kind"}),
		snapRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_snapshot_revision",
			Help: "etcd revision of the last snapshot this agent stored.",
		}),
		hashKVErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lifeboat_snapshot_hashkv_errors_total",
			Help: "Stored backups whose live HashKV comparison failed with an error (not a mismatch, which fails the backup; not a compaction past the revision).",
		}),
		backups: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lifeboat_backups",
			Help: "Backups in the store by state: ok, locked (ok and under Object Lock or legal hold), broken (data object missing or wrong, or manifest unreadable).",
		}, []string{"state"}),
		newest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_backup_newest_timestamp_seconds",
			Help: "Creation time of the newest backup whose data object is present (Unix time; 0: none).",
		}),
		newestProven: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_backup_newest_proven_timestamp_seconds",
			Help: "Creation time of the newest backup whose last drill passed (Unix time; 0: none).",
		}),
		drillResult: newOptionalGauge("lifeboat_drill_last_result",
			"Verdict of the last drill: 1 passed, 0 failed (absent until a drill is known)."),
		drillTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_drill_last_timestamp_seconds",
			Help: "When the last drill ended, whatever its verdict (Unix time; 0: none known).",
		}),
		drillPhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lifeboat_drill_phase_duration_seconds",
			Help: "Duration of each phase of the last drill this agent ran: fetch, decode, restore, verify, boot, checks.",
		}, []string{"phase"}),
		drillRecover: newOptionalGauge("lifeboat_drill_recovery_seconds",
			"Time the last drill this agent ran took from fetching the backup to a healthy restored member (absent until then)."),
		drillErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lifeboat_drill_errors_total",
			Help: "Drill runs that ended without a verdict on a backup (store unreachable, download failed, no space, no identity, timeout): errors of the run, not of the backup.",
		}),
		drillErrTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_drill_last_error_timestamp_seconds",
			Help: "When a drill run last ended without a verdict (Unix time; 0: not since start).",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lifeboat_retention_deleted_total",
			Help: "Backups deleted by the retention policy.",
		}),
		uploadBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lifeboat_upload_bytes_total",
			Help: "Bytes handed to the store by snapshot jobs (data objects and manifests, failed uploads included).",
		}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_leader",
			Help: "1 when this agent holds the cluster's lock and runs the scheduled jobs (always 1 without a lock).",
		}),
		storeUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_store_up",
			Help: "1 when the last request to the backup store (listing or readiness check) succeeded.",
		}),
		notifies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lifeboat_notifications_total",
			Help: "Webhook notifications by result: sent, failed (after retries) or dropped (queue full).",
		}, []string{"result"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "lifeboat_build_info",
			Help: "Always 1; the version label is lifeboat's version.",
		}, []string{"version"}),
		captureEnabled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_capture_enabled",
			Help: "1 when this agent is configured to capture changes (capture.enabled), 0 otherwise.",
		}),
		captureUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_capture_up",
			Help: "1 while this agent's capture job watches and writes change segments; 0 when it does not (standby, starting, taking its snapshot, restarting after an error, disabled).",
		}),
		captureRevision: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_capture_revision",
			Help: "Durable captured-through etcd revision of this agent's capture: every revision up to it is in stored change segments (0: none yet).",
		}),
		captureRecovery: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_capture_recovery_point_timestamp_seconds",
			Help: "The recovery point of this agent's capture: the latest time a point-in-time restore can reach (Unix time; 0: none yet).",
		}),
		captureGaps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lifeboat_capture_gaps_total",
			Help: "Capture generations sealed by a break of continuity, by reason: compacted, cluster_id, revision_backwards, broken_chain (a lost leader lock is none). After each one the capture starts a new generation from a fresh snapshot.",
		}, []string{"reason"}),
		captureWindows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "lifeboat_capture_window_problems",
			Help: "Capture windows (generations) in the store whose window ends before its stored segments or is not recoverable (a fork by a second writer, missing revisions, no anchor snapshot), as the agent's last listing of the store saw them; 0 without capture.",
		}),
		captureRestarts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "lifeboat_capture_restarts_total",
			Help: "Times the capture job ended while this agent still led and was started again (after a backoff).",
		}),
	}
	m.captureLag = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "lifeboat_capture_lag_seconds",
		Help: "Now minus the recovery point of this agent's capture, computed at scrape: how much a restore would lose now. It keeps growing while capture is stopped or stuck; before this agent's first durable point it is the time since it began capturing (a lower bound). NaN when this agent does not capture (disabled or standby).",
	}, func() float64 {
		if f := m.lag.Load(); f != nil {
			return (*f)()
		}
		return math.NaN()
	})
	m.captureStats = &capture.Stats{}
	counter := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, func() float64 { return float64(v.Load()) })
	}
	captureCounters := []prometheus.Collector{
		counter("lifeboat_capture_rollovers_total", "Capture generations rolled over to a scheduled snapshot (not a gap: the windows overlap).", &m.captureStats.Rollovers),
		counter("lifeboat_capture_compacted_segments_total", "Compacted change segments stored by this agent's capture.", &m.captureStats.Compacted),
		counter("lifeboat_capture_compaction_errors_total", "Compaction passes of this agent's capture that failed (retried at the next pass; the segments stay as they were).", &m.captureStats.CompactErrors),
	}
	for _, c := range captureCounters {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	for _, c := range []prometheus.Collector{m.lastSuccess, m.runs, m.duration, m.snapSize, m.snapRevision,
		m.hashKVErrors, m.backups, m.newest, m.newestProven, m.drillResult, m.drillTime, m.drillPhase, m.drillRecover,
		m.drillErrors, m.drillErrTime, m.deleted, m.uploadBytes, m.leader, m.storeUp, m.notifies, m.buildInfo,
		m.captureEnabled, m.captureUp, m.captureRevision, m.captureRecovery, m.captureLag, m.captureGaps, m.captureRestarts, m.captureWindows} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	for _, j := range jobs {
		m.lastSuccess.WithLabelValues(j)
		m.duration.WithLabelValues(j)
		for _, r := range []string{ResultSuccess, ResultFailure, ResultSkipped} {
			m.runs.WithLabelValues(j, r)
		}
		if j == JobDrill {
			for _, p := range DrillPhases {
				m.drillPhase.WithLabelValues(p)
			}
		}
		if j == JobSnapshot {
			m.snapSize.WithLabelValues("raw")
			m.snapSize.WithLabelValues("stored")
		}
	}
	for _, s := range []string{stateOK, stateBroken, stateLocked} {
		m.backups.WithLabelValues(s)
	}
	for _, r := range []string{"sent", "failed", "dropped"} {
		m.notifies.WithLabelValues(r)
	}
	for _, r := range capture.GapReasons {
		m.captureGaps.WithLabelValues(string(r))
	}
	m.buildInfo.WithLabelValues(version).Set(1)
	return m, nil
}

// optionalGauge is a gauge without labels that is not exported until it
// is first set: a verdict that is not known yet is absent, not 0.
type optionalGauge struct {
	desc *prometheus.Desc
	mu   sync.Mutex
	set  bool
	v    float64
}

func newOptionalGauge(name, help string) *optionalGauge {
	return &optionalGauge{desc: prometheus.NewDesc(name, help, nil, nil)}
}

func (g *optionalGauge) Set(v float64) {
	g.mu.Lock()
	g.set, g.v = true, v
	g.mu.Unlock()
}

// Unset makes the gauge absent again.
func (g *optionalGauge) Unset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.set = false
}

// Get returns the value and whether it was set.
func (g *optionalGauge) Get() (float64, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v, g.set
}

// Describe implements prometheus.Collector.
func (g *optionalGauge) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

// Collect implements prometheus.Collector.
func (g *optionalGauge) Collect(ch chan<- prometheus.Metric) {
	if v, ok := g.Get(); ok {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v)
	}
}
