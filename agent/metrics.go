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

// Kinds of untrusted objects: the values of the kind label of
// lifeboat_untrusted_objects, the documents the agent's listing checks
// for a trusted signature. (Change segments and kits join the set when
// their readers check signatures.)
const (
	untrustedBackup   = "backup"
	untrustedDrill    = "drill_report"
	untrustedProgress = "progress_marker"
)

// untrustedKinds are the kinds lifeboat_untrusted_objects exports.
var untrustedKinds = []string{untrustedBackup, untrustedDrill, untrustedProgress}

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
	unchanged    prometheus.Counter
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
	untrusted    *prometheus.GaugeVec // by kind (refresh)
	lineages     prometheus.Gauge
	notifies     *prometheus.CounterVec
	kubeErrors   *prometheus.CounterVec // by op (kube.go)
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

// agentMetrics are the agent's metrics, one row a metric: the field of
// metrics it fills (whose type says what kind of metric it is), its name,
// its labels and its help. newMetrics makes and registers them in this
// order.
var agentMetrics = []metricDef[metrics]{
	{field: func(m *metrics) any { return &m.lastSuccess }, name: "lifeboat_job_last_success_timestamp_seconds", labels: []string{JobLabel},
		help: "When a job last succeeded (Unix time; 0: not since start and not known from the store)."},
	{field: func(m *metrics) any { return &m.runs }, name: "lifeboat_job_runs_total", labels: []string{JobLabel, "result"},
		help: "Job runs by result: success, failure, or skipped (the previous run was still going)."},
	{field: func(m *metrics) any { return &m.duration }, name: "lifeboat_job_duration_seconds", labels: []string{JobLabel}, buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		help: "How long job runs took (retries of a snapshot included)."},
	{field: func(m *metrics) any { return &m.snapSize }, name: "lifeboat_snapshot_size_bytes", labels: []string{"kind"},
		help: "Size of the last snapshot this agent stored: raw (the etcd database) or stored (after compression and encryption)."},
	{field: func(m *metrics) any { return &m.snapRevision }, name: "lifeboat_snapshot_revision",
		help: "etcd revision of the last snapshot this agent stored."},
	{field: func(m *metrics) any { return &m.hashKVErrors }, name: "lifeboat_snapshot_hashkv_errors_total",
		help: "Stored backups whose live HashKV comparison failed with an error (not a mismatch, which fails the backup; not a compaction past the revision)."},
	{field: func(m *metrics) any { return &m.unchanged }, name: "lifeboat_snapshot_unchanged_total",
		help: "Scheduled snapshots not stored because the cluster was unchanged since the newest backup (same revision, every member's HashKV equal to it): successful runs."},
	{field: func(m *metrics) any { return &m.backups }, name: "lifeboat_backups", labels: []string{"state"},
		help: "Backups in the store by state: ok, locked (ok and under Object Lock or legal hold), broken (data object missing or wrong, or manifest unreadable)."},
	{field: func(m *metrics) any { return &m.newest }, name: "lifeboat_backup_newest_timestamp_seconds",
		help: "Creation time of the newest backup whose data object is present (Unix time; 0: none)."},
	{field: func(m *metrics) any { return &m.newestProven }, name: "lifeboat_backup_newest_proven_timestamp_seconds",
		help: "Creation time of the newest backup whose last drill passed, or the last time the snapshot job found the cluster unchanged since it when it is the newest backup (Unix time; 0: none)."},
	{field: func(m *metrics) any { return &m.drillResult }, name: "lifeboat_drill_last_result",
		help: "Verdict of the last drill: 1 passed, 0 failed (absent until a drill is known)."},
	{field: func(m *metrics) any { return &m.drillTime }, name: "lifeboat_drill_last_timestamp_seconds",
		help: "When the last drill ended, whatever its verdict (Unix time; 0: none known)."},
	{field: func(m *metrics) any { return &m.drillPhase }, name: "lifeboat_drill_phase_duration_seconds", labels: []string{"phase"},
		help: "Duration of each phase of the last drill this agent ran: fetch, decode, restore, verify, boot, checks."},
	{field: func(m *metrics) any { return &m.drillRecover }, name: "lifeboat_drill_recovery_seconds",
		help: "Time the last drill this agent ran took from fetching the backup to a healthy restored member (absent until then)."},
	{field: func(m *metrics) any { return &m.drillErrors }, name: "lifeboat_drill_errors_total",
		help: "Drill runs that ended without a verdict on a backup (store unreachable, download failed, no space, no identity, timeout): errors of the run, not of the backup."},
	{field: func(m *metrics) any { return &m.drillErrTime }, name: "lifeboat_drill_last_error_timestamp_seconds",
		help: "When a drill run last ended without a verdict (Unix time; 0: not since start)."},
	{field: func(m *metrics) any { return &m.kitExpiry }, name: "lifeboat_kit_cert_expiry_timestamp_seconds",
		help: "Earliest expiry of the certificates in the recovery kit of the newest backup drilled (Unix time; absent until a drill checked a kit)."},
	{field: func(m *metrics) any { return &m.deleted }, name: "lifeboat_retention_deleted_total",
		help: "Backups deleted by the retention policy."},
	{field: func(m *metrics) any { return &m.uploadBytes }, name: "lifeboat_upload_bytes_total",
		help: "Bytes handed to the store by snapshot jobs (data objects and manifests, failed uploads included)."},
	{field: func(m *metrics) any { return &m.leader }, name: "lifeboat_leader",
		help: "1 when this agent holds the cluster's lock and runs the scheduled jobs (always 1 without a lock)."},
	{field: func(m *metrics) any { return &m.storeUp }, name: "lifeboat_store_up",
		help: "1 when the last request to the backup store (listing or readiness check) succeeded."},
	{field: func(m *metrics) any { return &m.untrusted }, name: "lifeboat_untrusted_objects", labels: []string{"kind"},
		help: "Objects in the store not signed by a trusted key (signing.trusted_keys), as the agent's last listing found them, by kind: backup (manifests), drill_report (the newest report of each backup), progress_marker (with capture configured). Anything above 0: someone without this cluster's signing key wrote to the store. 0 without trusted keys."},
	{field: func(m *metrics) any { return &m.lineages }, name: "lifeboat_lineages",
		help: "etcd cluster lineages whose trusted backups the store holds under this cluster name, as the agent's last listing found them: 1 normally, more after another etcd cluster wrote there or a cluster was adopted (lineage.adopt_cluster) until the old lineage's backups are pruned."},
	{field: func(m *metrics) any { return &m.notifies }, name: "lifeboat_notifications_total", labels: []string{"result"},
		help: "Webhook notifications by result: sent, failed (after retries) or dropped (queue full)."},
	{field: func(m *metrics) any { return &m.kubeErrors }, name: "lifeboat_kubernetes_sync_failures_total", labels: []string{"op"},
		help: "Failed writes of the Kubernetes objects (kubernetes.objects.enabled) by op: sync (the EtcdBackup and EtcdRecoverability objects after a job) or event (a failed backup's or drill's Event). Never a failed backup: the next job's sync catches up."},
	{field: func(m *metrics) any { return &m.buildInfo }, name: "lifeboat_build_info", labels: []string{"version"},
		help: "Always 1; the version label is lifeboat's version."},
	{field: func(m *metrics) any { return &m.captureEnabled }, name: "lifeboat_capture_enabled",
		help: "1 when this agent is configured to capture changes (capture.enabled), 0 otherwise."},
	{field: func(m *metrics) any { return &m.captureUp }, name: "lifeboat_capture_up",
		help: "1 while this agent's capture job watches and writes change segments; 0 when it does not (standby, starting, taking its snapshot, restarting after an error, disabled)."},
	{field: func(m *metrics) any { return &m.captureRevision }, name: "lifeboat_capture_revision",
		help: "Durable captured-through etcd revision of this agent's capture: every revision up to it is in stored change segments (0: none yet)."},
	{field: func(m *metrics) any { return &m.captureRecovery }, name: "lifeboat_capture_recovery_point_timestamp_seconds",
		help: "The recovery point of this agent's capture: the latest time a point-in-time restore can reach (Unix time; 0: none yet)."},
	{field: func(m *metrics) any { return &m.captureGaps }, name: "lifeboat_capture_gaps_total", labels: []string{"reason"},
		help: "Capture generations sealed by a break of continuity, by reason: compacted, cluster_id, revision_backwards, broken_chain (a lost leader lock is none). After each one the capture starts a new generation from a fresh snapshot."},
	{field: func(m *metrics) any { return &m.captureWindows }, name: "lifeboat_capture_window_problems",
		help: "Capture windows (generations) in the store whose window ends before its stored segments or is not recoverable (a fork by a second writer, missing revisions, no anchor snapshot), as the agent's last listing of the store saw them; 0 without capture."},
	{field: func(m *metrics) any { return &m.captureRestarts }, name: "lifeboat_capture_restarts_total",
		help: "Times the capture job ended while this agent still led and was started again (after a backoff)."},
	{field: func(m *metrics) any { return &m.captureLag }, name: "lifeboat_capture_lag_seconds", value: (*metrics).lagSeconds,
		help: "Now minus the recovery point of this agent's capture, computed at scrape: how much a restore would lose now. It keeps growing while capture is stopped or stuck; before this agent's first durable point it is the time since it began capturing (a lower bound). NaN when this agent does not capture (disabled or standby)."},
	{field: func(m *metrics) any { return &m.captureStats.Rollovers }, name: "lifeboat_capture_rollovers_total",
		help: "Capture generations rolled over to a scheduled snapshot (not a gap: the windows overlap)."},
	{field: func(m *metrics) any { return &m.captureStats.Compacted }, name: "lifeboat_capture_compacted_segments_total",
		help: "Compacted change segments stored by this agent's capture."},
	{field: func(m *metrics) any { return &m.captureStats.CompactErrors }, name: "lifeboat_capture_compaction_errors_total",
		help: "Compaction passes of this agent's capture that failed (retried at the next pass; the segments stay as they were)."},
}

// newMetrics creates the metrics, registers them with reg and creates the
// series of every enabled job so that they exist (at 0) from the first
// scrape.
func newMetrics(reg prometheus.Registerer, jobs []string, version string) (*metrics, error) {
	m := &metrics{captureStats: &capture.Stats{}}
	if err := registerMetrics(reg, m, agentMetrics); err != nil {
		return nil, err
	}
	m.initSeries(jobs, version)
	return m, nil
}

// lagSeconds is lifeboat_capture_lag_seconds at scrape: NaN while no
// capture sets the lag.
func (m *metrics) lagSeconds() float64 {
	if f := m.lag.Load(); f != nil {
		return (*f)()
	}
	return math.NaN()
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
	for _, k := range untrustedKinds {
		m.untrusted.WithLabelValues(k)
	}
	for _, r := range []string{"sent", "failed", "dropped"} {
		m.notifies.WithLabelValues(r)
	}
	for _, op := range []string{kubeOpSync, kubeOpEvent} {
		m.kubeErrors.WithLabelValues(op)
	}
	for _, r := range capture.GapReasons {
		m.captureGaps.WithLabelValues(string(r))
	}
	m.buildInfo.WithLabelValues(version).Set(1)
}

// metricDef is one row of a metrics table (agentMetrics, copyMetricDefs):
// field returns a pointer to the field of M the metric fills, and the
// field's type says the metric's kind: a Gauge or Counter (without labels),
// a GaugeVec, CounterVec or HistogramVec (with labels; buckets for the
// histogram), an optionalGauge, a GaugeFunc computed at scrape by value, or
// an atomic counter exported as a counter.
type metricDef[M any] struct {
	field      func(*M) any
	name, help string
	labels     []string
	buckets    []float64
	value      func(*M) float64
}

// registerMetrics makes each metric of defs into its field of m and
// registers it with reg.
func registerMetrics[M any](reg prometheus.Registerer, m *M, defs []metricDef[M]) error {
	for _, d := range defs {
		c, err := d.make(m)
		if err != nil {
			return err
		}
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}

// make creates the metric, stores it in its field of m and returns it.
func (d metricDef[M]) make(m *M) (prometheus.Collector, error) {
	gauge := prometheus.GaugeOpts{Name: d.name, Help: d.help}
	counter := prometheus.CounterOpts{Name: d.name, Help: d.help}
	switch f := d.field(m).(type) {
	case *prometheus.Gauge:
		*f = prometheus.NewGauge(gauge)
		return *f, nil
	case **prometheus.GaugeVec:
		*f = prometheus.NewGaugeVec(gauge, d.labels)
		return *f, nil
	case *prometheus.Counter:
		*f = prometheus.NewCounter(counter)
		return *f, nil
	case **prometheus.CounterVec:
		*f = prometheus.NewCounterVec(counter, d.labels)
		return *f, nil
	case **prometheus.HistogramVec:
		*f = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.name, Help: d.help, Buckets: d.buckets}, d.labels)
		return *f, nil
	case **optionalGauge:
		*f = newOptionalGauge(d.name, d.help)
		return *f, nil
	case *prometheus.GaugeFunc:
		*f = prometheus.NewGaugeFunc(gauge, func() float64 { return d.value(m) })
		return *f, nil
	case *atomic.Int64:
		return prometheus.NewCounterFunc(counter, func() float64 { return float64(f.Load()) }), nil
	default:
		return nil, fmt.Errorf("register metrics: %s: no metric for a field of type %T", d.name, f)
	}
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
