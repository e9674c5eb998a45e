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

	// kitExpiry is set from the drill of the newest backup drilled so
	// far (kitExpiryFrom): a random drill of an older backup, whose kit
	// may hold certificates renewed since, does not override it.
	kitExpiry     *optionalGauge
	kitExpiryFrom string
}

// newMetrics creates the metrics, registers them with reg and creates the
// series of every enabled job so that they exist (at 0) from the first
// scrape.
func newMetrics(reg prometheus.Registerer, jobs []string, version string) (*metrics, error) {
	var b metricSet
	m := &metrics{
		lastSuccess: b.gaugeVec("lifeboat_job_last_success_timestamp_seconds",
			"When a job last succeeded (Unix time; 0: not since start and not known from the store).", JobLabel),
		runs: b.counterVec("lifeboat_job_runs_total",
			"Job runs by result: success, failure, or skipped (the previous run was still going).", JobLabel, "result"),
		duration: b.histogramVec("lifeboat_job_duration_seconds", []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
			"How long job runs took (retries of a snapshot included).", JobLabel),
		snapSize: b.gaugeVec("lifeboat_snapshot_size_bytes",
			"Size of the last snapshot this agent stored: raw (the etcd database) or stored (after compression and encryption).", "kind"),
		snapRevision: b.gauge("lifeboat_snapshot_revision",
			"etcd revision of the last snapshot this agent stored."),
		hashKVErrors: b.counter("lifeboat_snapshot_hashkv_errors_total",
			"Stored backups whose live HashKV comparison failed with an error (not a mismatch, which fails the backup; not a compaction past the revision)."),
		backups: b.gaugeVec("lifeboat_backups",
			"Backups in the store by state: ok, locked (ok and under Object Lock or legal hold), broken (data object missing or wrong, or manifest unreadable).", "state"),
		newest: b.gauge("lifeboat_backup_newest_timestamp_seconds",
			"Creation time of the newest backup whose data object is present (Unix time; 0: none)."),
		newestProven: b.gauge("lifeboat_backup_newest_proven_timestamp_seconds",
			"Creation time of the newest backup whose last drill passed (Unix time; 0: none)."),
		drillResult: b.optional("lifeboat_drill_last_result",
			"Verdict of the last drill: 1 passed, 0 failed (absent until a drill is known)."),
		drillTime: b.gauge("lifeboat_drill_last_timestamp_seconds",
			"When the last drill ended, whatever its verdict (Unix time; 0: none known)."),
		drillPhase: b.gaugeVec("lifeboat_drill_phase_duration_seconds",
			"Duration of each phase of the last drill this agent ran: fetch, decode, restore, verify, boot, checks.", "phase"),
		drillRecover: b.optional("lifeboat_drill_recovery_seconds",
			"Time the last drill this agent ran took from fetching the backup to a healthy restored member (absent until then)."),
		drillErrors: b.counter("lifeboat_drill_errors_total",
			"Drill runs that ended without a verdict on a backup (store unreachable, download failed, no space, no identity, timeout): errors of the run, not of the backup."),
		drillErrTime: b.gauge("lifeboat_drill_last_error_timestamp_seconds",
			"When a drill run last ended without a verdict (Unix time; 0: not since start)."),
		kitExpiry: b.optional("lifeboat_kit_cert_expiry_timestamp_seconds",
			"Earliest expiry of the certificates in the recovery kit of the newest backup drilled (Unix time; absent until a drill checked a kit)."),
		deleted: b.counter("lifeboat_retention_deleted_total",
			"Backups deleted by the retention policy."),
		uploadBytes: b.counter("lifeboat_upload_bytes_total",
			"Bytes handed to the store by snapshot jobs (data objects and manifests, failed uploads included)."),
		leader: b.gauge("lifeboat_leader",
			"1 when this agent holds the cluster's lock and runs the scheduled jobs (always 1 without a lock)."),
		storeUp: b.gauge("lifeboat_store_up",
			"1 when the last request to the backup store (listing or readiness check) succeeded."),
		notifies: b.counterVec("lifeboat_notifications_total",
			"Webhook notifications by result: sent, failed (after retries) or dropped (queue full).", "result"),
		buildInfo: b.gaugeVec("lifeboat_build_info",
			"Always 1; the version label is lifeboat's version.", "version"),
		captureEnabled: b.gauge("lifeboat_capture_enabled",
			"1 when this agent is configured to capture changes (capture.enabled), 0 otherwise."),
		captureUp: b.gauge("lifeboat_capture_up",
			"1 while this agent's capture job watches and writes change segments; 0 when it does not (standby, starting, taking its snapshot, restarting after an error, disabled)."),
		captureRevision: b.gauge("lifeboat_capture_revision",
			"Durable captured-through etcd revision of this agent's capture: every revision up to it is in stored change segments (0: none yet)."),
		captureRecovery: b.gauge("lifeboat_capture_recovery_point_timestamp_seconds",
			"The recovery point of this agent's capture: the latest time a point-in-time restore can reach (Unix time; 0: none yet)."),
		captureGaps: b.counterVec("lifeboat_capture_gaps_total",
			"Capture generations sealed by a break of continuity, by reason: compacted, cluster_id, revision_backwards, broken_chain (a lost leader lock is none). After each one the capture starts a new generation from a fresh snapshot.", "reason"),
		captureWindows: b.gauge("lifeboat_capture_window_problems",
			"Capture windows (generations) in the store whose window ends before its stored segments or is not recoverable (a fork by a second writer, missing revisions, no anchor snapshot), as the agent's last listing of the store saw them; 0 without capture."),
		captureRestarts: b.counter("lifeboat_capture_restarts_total",
			"Times the capture job ended while this agent still led and was started again (after a backoff)."),
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
	b = append(b, m.captureLag)
	b = append(b, captureCounters...)
	for _, c := range b {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	m.initSeries(jobs, version)
	return m, nil
}

// initSeries creates the series of every enabled job and every fixed
// label value, so that they exist (at 0) from the first scrape.
func (m *metrics) initSeries(jobs []string, version string) {
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
}

// metricSet builds metrics and keeps each one, for newMetrics to
// register them all: one line a metric.
type metricSet []prometheus.Collector

func (b *metricSet) keep(c prometheus.Collector) { *b = append(*b, c) }

func (b *metricSet) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	b.keep(g)
	return g
}

func (b *metricSet) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	b.keep(g)
	return g
}

func (b *metricSet) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	b.keep(c)
	return c
}

func (b *metricSet) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	b.keep(c)
	return c
}

func (b *metricSet) histogramVec(name string, buckets []float64, help string, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	b.keep(h)
	return h
}

func (b *metricSet) optional(name, help string) *optionalGauge {
	g := newOptionalGauge(name, help)
	b.keep(g)
	return g
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
