package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-dev/lifeboat/scrub"
)

// JobScrub is the scrub job's name (scrub.schedule): it scrubs the
// primary and then every copy with a Scrub job.
const JobScrub = "scrub"

// ScrubStorePrimary is the store label of the primary's scrub metrics;
// a copy's are labelled with its name.
const ScrubStorePrimary = "primary"

// scrubMetrics are the scrub's metrics, by store.
type scrubMetrics struct {
	bytes       *prometheus.CounterVec
	checked     *prometheus.CounterVec
	damaged     *prometheus.GaugeVec
	notChecked  *prometheus.GaugeVec
	lastSuccess *prometheus.GaugeVec

	mu   sync.Mutex
	last map[string]int64 // lastSuccess by store, in Unix seconds
}

// succeeded sets a store's last success to at when it is later than
// what is known; it reports whether it did.
func (m *scrubMetrics) succeeded(store string, at int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if at <= m.last[store] {
		return false
	}
	m.last[store] = at
	m.lastSuccess.WithLabelValues(store).Set(float64(at))
	return true
}

// scrubMetricDefs are the scrub's metrics, one row a metric (see
// metricDef).
var scrubMetricDefs = []metricDef[scrubMetrics]{
	{field: func(m *scrubMetrics) any { return &m.bytes }, name: "lifeboat_scrub_bytes_read_total", labels: []string{"store"},
		help: "Bytes the scrub read from a store (encryption headers and objects read in full)."},
	{field: func(m *scrubMetrics) any { return &m.checked }, name: "lifeboat_scrub_objects_checked_total", labels: []string{"store"},
		help: "Objects the scrub checked in a store (existence, size, encryption header; some read in full)."},
	{field: func(m *scrubMetrics) any { return &m.damaged }, name: "lifeboat_scrub_damaged_objects", labels: []string{"store"},
		help: "Objects the last scrub of a store found damaged (missing, wrong size or checksum, not opening with the configured identities); absent until a scrub ran."},
	{field: func(m *scrubMetrics) any { return &m.notChecked }, name: "lifeboat_scrub_not_checked_objects", labels: []string{"store"},
		help: "Objects the last scrub of a store could not read (store or network errors): unknown, not good."},
	{field: func(m *scrubMetrics) any { return &m.lastSuccess }, name: "lifeboat_scrub_last_success_timestamp_seconds", labels: []string{"store"},
		help: "When the last scrub of a store checked every object (damage found or not; Unix time; 0: not since start and not known from the store)."},
}

// scrubStore is one store the scrub job scrubs.
type scrubStore struct {
	name string
	job  *scrub.Job
}

// scrubStores are the primary's and every copy's scrub jobs.
func (a *Agent) scrubStores() []scrubStore {
	var out []scrubStore
	if a.cfg.Scrub != nil {
		out = append(out, scrubStore{ScrubStorePrimary, a.cfg.Scrub})
	}
	for _, c := range a.cfg.Copies {
		if c.Scrub != nil {
			out = append(out, scrubStore{c.Name, c.Scrub})
		}
	}
	return out
}

// initScrub registers the scrub's metrics when the job is enabled, with
// each store's last success from its scrub state in the store.
func (a *Agent) initScrub() error {
	if a.cfg.Scrub == nil || a.cfg.Schedules.Scrub == "" {
		return nil
	}
	m := &scrubMetrics{last: map[string]int64{}}
	if err := registerMetrics(a.reg, m, scrubMetricDefs); err != nil {
		return err
	}
	for _, s := range a.scrubStores() {
		m.bytes.WithLabelValues(s.name)
		m.checked.WithLabelValues(s.name)
		m.lastSuccess.WithLabelValues(s.name)
	}
	a.sm = m
	return nil
}

// learnScrubs sets each store's last scrub success from its scrub state
// (a restarted agent, agent --once): what is unreadable stays unknown.
func (a *Agent) learnScrubs(ctx context.Context) {
	if a.sm == nil {
		return
	}
	for _, s := range a.scrubStores() {
		st, err := s.job.Repo.LatestScrubState(ctx)
		if err != nil || st == nil || st.NotChecked > 0 {
			continue
		}
		if a.sm.succeeded(s.name, st.At.Unix()) {
			a.sm.damaged.WithLabelValues(s.name).Set(float64(st.Damaged))
			a.sm.notChecked.WithLabelValues(s.name).Set(0)
		}
	}
}

// scrubRun is the scrub job: every store in turn. It fails when a store
// could not be scrubbed, holds damage or objects not checked.
func (a *Agent) scrubRun(ctx context.Context) (string, error) {
	var errs []error
	for _, s := range a.scrubStores() {
		j := *s.job
		j.Now = a.clock.Now
		res, err := scrub.Run(ctx, j, a.lg.With("store", s.name))
		if err != nil {
			errs = append(errs, fmt.Errorf("scrub of %s: %w", s.name, err))
			continue
		}
		a.scrubMetric(s.name, res)
		for _, f := range res.Damaged {
			a.lg.Error("scrub found damage", "store", s.name, "object", f.Key, "kind", f.Kind, "problem", f.Problem)
		}
		if !res.Sound() {
			errs = append(errs, fmt.Errorf("scrub of %s: %d damaged, %d not checked", s.name, len(res.Damaged), len(res.NotChecked)))
		}
	}
	return "", errors.Join(errs...)
}

func (a *Agent) scrubMetric(store string, res *scrub.Result) {
	a.sm.bytes.WithLabelValues(store).Add(float64(res.BytesRead))
	a.sm.checked.WithLabelValues(store).Add(float64(res.Objects))
	a.sm.damaged.WithLabelValues(store).Set(float64(len(res.Damaged)))
	a.sm.notChecked.WithLabelValues(store).Set(float64(len(res.NotChecked)))
	if len(res.NotChecked) == 0 {
		a.sm.succeeded(store, res.At.Unix())
	}
}
