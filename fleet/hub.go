package fleet

import (
	"context"
	"html/template"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// HubConfig is what a Hub reads and how often.
type HubConfig struct {
	Sources []Source
	// Reader reads them (nil: NewReader, nothing kept across restarts).
	Reader *Reader
	// Drills, when set, drills the clusters that are due after each
	// refresh (one round at a time, beside the refreshes).
	Drills *Drills
	// Interval is the time between refreshes (default 1m).
	Interval time.Duration
	// FullEvery is how often a refresh lists every store in full
	// (Reader.Read; the others are Reader.Refresh, which lists only what
	// can have changed): a change behind the agents' backs shows within
	// it. 0: DefaultFullEvery; at most Interval: every refresh.
	FullEvery time.Duration
	// Policy judges the clusters (zero: DefaultPolicy).
	Policy Policy
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// After waits like time.After (nil: time.After); tests drive it.
	After func(time.Duration) <-chan time.Time
}

// Hub is the fleet daemon's state: the report of its last refresh,
// served as Prometheus metrics, JSON and an HTML page (Handler). It
// never writes to a store.
type Hub struct {
	cfg    HubConfig
	lg     *slog.Logger
	reader *Reader
	reg    *prometheus.Registry
	// drillRuns counts the hub's drills by result.
	drillRuns *prometheus.CounterVec

	mu        sync.Mutex
	report    *Report
	refreshed time.Time
	took      time.Duration
	refreshes int
	// lastFull is the start of the last full read (zero: none yet).
	lastFull time.Time
}

// NewHub returns a hub that has not read anything yet; lg receives one
// line per refresh.
func NewHub(cfg HubConfig, lg *slog.Logger) *Hub {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.FullEvery <= 0 {
		cfg.FullEvery = DefaultFullEvery
	}
	if cfg.Policy == (Policy{}) {
		cfg.Policy = DefaultPolicy()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.After == nil {
		cfg.After = time.After
	}
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	if cfg.Reader == nil {
		cfg.Reader = NewReader()
	}
	h := &Hub{cfg: cfg, lg: lg, reader: cfg.Reader, reg: prometheus.NewRegistry(),
		drillRuns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lifeboat_fleet_drills_total",
			Help: "Drills the hub ran, by result: passed, failed (a verdict against the backup, stored as the cluster's report), error (no verdict)."}, []string{"result"})}
	for _, r := range []string{"passed", "failed", "error"} {
		h.drillRuns.WithLabelValues(r)
	}
	h.reg.MustRegister(hubCollector{h}, h.drillRuns)
	return h
}

// Refresh reads the fleet and replaces the report; it fails only when
// ctx ends (a store that cannot be read is that store's row). The first
// refresh and then one at least every FullEvery list every store in
// full; the others list what can have changed (Reader.Refresh).
func (h *Hub) Refresh(ctx context.Context) error {
	start := h.cfg.Now()
	read, full := h.reader.Refresh, h.lastFull.IsZero() || start.Sub(h.lastFull) >= h.cfg.FullEvery || h.cfg.FullEvery <= h.cfg.Interval
	if full {
		read = h.reader.Read
	}
	cs, err := read(ctx, h.cfg.Sources, h.lg)
	if err != nil {
		return err
	}
	if full {
		h.lastFull = start
	}
	now := h.cfg.Now()
	r := NewReport(cs, h.cfg.Policy, now)
	h.mu.Lock()
	h.report, h.refreshed, h.took = r, now, now.Sub(start)
	h.refreshes++
	h.mu.Unlock()
	h.lg.Info("fleet refreshed", "clusters", len(r.Clusters), "with_problems", r.Problems(), "full", full, "seconds", now.Sub(start).Seconds())
	return nil
}

// Run refreshes now and every Interval (counted from each refresh's
// start; a refresh longer than Interval is followed at once) until ctx ends; with Drills, a
// round of the drills due is started after a refresh when none is
// running. It returns nil when ctx ends, after the round has ended
// (its drills stop and clean up with ctx).
func (h *Hub) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	round := make(chan struct{}, 1)
	for {
		start := time.Now()
		if err := h.Refresh(ctx); err != nil && ctx.Err() == nil {
			h.lg.Warn("fleet refresh failed", "err", err)
		}
		if rep := h.Report(); h.cfg.Drills != nil && rep != nil && ctx.Err() == nil {
			select {
			case round <- struct{}{}:
				wg.Go(func() {
					defer func() { <-round }()
					h.drillRound(ctx, rep)
				})
			default: // the last round is still running
			}
		}
		select {
		case <-ctx.Done():
			if err := h.reader.Save(); err != nil {
				h.lg.Warn("cannot save the fleet cache (the next start reads the stores cold)", "err", err)
			}
			return nil
		case <-h.cfg.After(max(h.cfg.Interval-time.Since(start), 0)):
		}
	}
}

// drillRound runs the drills due by rep and counts their results.
func (h *Hub) drillRound(ctx context.Context, rep *Report) {
	due := h.cfg.Drills.Due(rep, h.cfg.Now())
	if len(due) == 0 {
		return
	}
	h.lg.Info("fleet drills starting", "clusters", len(due))
	results := h.cfg.Drills.Run(ctx, h.cfg.Sources, due)
	for _, r := range results { // the reports it stored: read them at the next refresh
		h.reader.Touch(r.Store, r.Cluster)
	}
	for _, r := range results {
		result := "error"
		switch {
		case r.Outcome != nil && r.Outcome.Passed:
			result = "passed"
		case r.Outcome != nil && !r.Outcome.RunError:
			result = "failed"
		}
		h.drillRuns.WithLabelValues(result).Inc()
	}
}

// Report is the last refresh's report (nil before the first).
func (h *Hub) Report() *Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.report
}

// Handler serves / (the status page), /api/v1/clusters (the report as
// JSON), /metrics and /healthz. Before the first refresh the page and
// the API answer 503.
func (h *Hub) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(h.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /api/v1/clusters", func(w http.ResponseWriter, r *http.Request) {
		rep, ok := h.ready(w)
		if !ok {
			return
		}
		if r.URL.Query().Get("problems") != "" {
			rep = rep.WithProblems()
		}
		w.Header().Set("Content-Type", "application/json")
		rep.WriteJSON(w)
	})
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, r *http.Request) {
		rep, ok := h.ready(w)
		if !ok {
			return
		}
		store, name := r.URL.Query().Get("store"), r.URL.Query().Get("name")
		for _, s := range rep.Clusters {
			if s.Store == store && s.Name == name {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				if err := clusterPage.Execute(w, clusterView{Status: s, Now: rep.Now.UTC().Format(time.RFC3339)}); err != nil {
					h.lg.Warn("render a cluster's page", "cluster", name, "err", err)
				}
				return
			}
		}
		http.Error(w, "no cluster "+name+" in store "+store+" at the last refresh", http.StatusNotFound)
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		rep, ok := h.ready(w)
		if !ok {
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := page.Execute(w, pageData(rep)); err != nil {
			h.lg.Warn("render the status page", "err", err)
		}
	})
	return mux
}

func (h *Hub) ready(w http.ResponseWriter) (*Report, bool) {
	rep := h.Report()
	if rep == nil {
		http.Error(w, "the fleet has not been read yet", http.StatusServiceUnavailable)
		return nil, false
	}
	return rep, true
}

type pageRow struct {
	Cells    []string
	Problems []Problem
	// Link is the cluster's own page.
	Link string
}

type pageView struct {
	Now      string
	Columns  []string
	Rows     []pageRow
	Problems int
	Total    int
}

func pageData(r *Report) pageView {
	v := pageView{Now: r.Now.UTC().Format(time.RFC3339), Columns: Columns[:len(Columns)-1], Problems: r.Problems(), Total: len(r.Clusters)}
	for _, s := range r.Clusters {
		cells := r.Row(s)
		v.Rows = append(v.Rows, pageRow{Cells: cells[:len(cells)-1], Problems: s.Problems, Link: clusterLink(s)})
	}
	return v
}

// page is the status page: one table, the clusters with problems first,
// no JavaScript.
var page = template.Must(template.New("fleet").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="60">
<title>lifeboat fleet: {{.Problems}} of {{.Total}} clusters with problems</title>
<style>
body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}
th,td{border:1px solid #ccc;padding:.3em .5em;text-align:left;vertical-align:top;font-size:90%}
tr.problem{background:#fde2e2}tr.ok{background:#e6f6e6}ul{margin:0;padding-left:1.2em}
</style></head><body>
<h1>lifeboat fleet</h1>
<p>{{.Problems}} of {{.Total}} clusters with problems, as read at {{.Now}}. Problem clusters first.</p>
<table><thead><tr>{{range .Columns}}<th>{{.}}</th>{{end}}<th>PROBLEMS</th></tr></thead><tbody>
{{range $row := .Rows}}<tr class="{{if .Problems}}problem{{else}}ok{{end}}">{{range $i, $c := .Cells}}<td>{{if eq $i 1}}<a href="{{$row.Link}}">{{$c}}</a>{{else}}{{$c}}{{end}}</td>{{end}}<td>{{if .Problems}}<ul>{{range .Problems}}<li><b>{{.Kind}}</b>: {{.Text}}</li>{{end}}</ul>{{else}}none{{end}}</td></tr>
{{end}}</tbody></table>
<p><a href="/api/v1/clusters">JSON</a> · <a href="/metrics">metrics</a></p>
</body></html>
`))

// clusterLink is the address of a cluster's page.
func clusterLink(s Status) string {
	return "/cluster?" + url.Values{"store": {s.Store}, "name": {s.Name}}.Encode()
}

type clusterView struct {
	Status
	Now string
}

// Listed is how many backups were listed (intact, broken, untrusted).
func (v clusterView) Listed() int { return v.Backups + v.Broken + v.Untrusted }

// clusterPage is one cluster's page: everything the fleet read and
// decided about it, no JavaScript.
var clusterPage = template.Must(template.New("cluster").Funcs(template.FuncMap{
	"t": func(t any) string {
		switch v := t.(type) {
		case time.Time:
			if v.IsZero() {
				return "-"
			}
			return v.UTC().Format(time.RFC3339)
		case *time.Time:
			if v == nil || v.IsZero() {
				return "-"
			}
			return v.UTC().Format(time.RFC3339)
		}
		return "-"
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>lifeboat fleet: {{.Name}}</title>
<style>body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.3em .5em;text-align:left;font-size:90%}th{background:#eee}.bad{color:#a00}</style>
</head><body>
<p><a href="/">fleet</a></p>
<h1>{{.Name}} <small>in {{.Store}}</small></h1>
<p>As read at {{.Now}}.</p>
<h2>Problems</h2>
{{if .Problems}}<ul>{{range .Problems}}<li class="bad"><b>{{.Kind}}</b>: {{.Text}}</li>{{end}}</ul>{{else}}<p>None.</p>{{end}}
{{if .ReadError}}<p class="bad">Cannot be read: {{.ReadError}}</p>{{end}}
<h2>Backups</h2>
<table>
<tr><th>intact</th><td>{{.Backups}}</td></tr>
<tr><th>broken / unreadable / untrusted</th><td>{{.Broken}} / {{.Unreadable}} / {{.Untrusted}}</td></tr>
<tr><th>lineages</th><td>{{range .Lineages}}{{.}} {{end}}{{if .LineageError}}<span class="bad">{{.LineageError}}</span>{{end}}</td></tr>
<tr><th>newest</th><td>{{with .Newest}}{{.ID}} (created {{t .CreatedAt}}, revision {{.Revision}}){{else}}none{{end}}</td></tr>
<tr><th>next due</th><td>{{t .NextExpected}} by {{.ExpectedBy}}; late after {{t .StaleAt}}</td></tr>
<tr><th>recovery point</th><td>{{t .RecoveryPoint}} ({{.RecoverySource}})</td></tr>
</table>
{{if not .IndexedAt.IsZero}}<p>Listed as its agent's index of {{t .IndexedAt}} says: objects not checked against the store by this read (the next full read lists every one).</p>{{end}}
{{if .History}}<h3>Every backup{{if lt (len .History) .Listed}} (the newest {{len .History}} of {{.Listed}}){{end}}</h3>
<table><tr><th>backup</th><th>created</th><th>revision</th><th>state</th><th>newest drill</th></tr>
{{range .History}}<tr><td>{{.ID}}</td><td>{{t .CreatedAt}}</td><td>{{.Revision}}</td><td{{if ne .State "ok"}} class="bad"{{end}}>{{.State}}{{if .Problem}}: {{.Problem}}{{end}}</td><td>{{with .Drill}}<span{{if ne .State "passed"}} class="bad"{{end}}>{{.State}}</span> {{t .Started}}{{if .RTO}}, RTO {{.RTO}} s{{end}}{{if .Error}}: {{.Error}}{{end}}{{else}}-{{end}}</td></tr>
{{end}}</table>{{end}}
<h2>Change windows</h2>
{{if .Windows}}<table><tr><th>generation</th><th>revisions</th><th>time</th><th>recoverable</th><th>sealed</th><th>problem</th></tr>
{{range .Windows}}<tr><td>{{.Generation}}</td><td>{{.From}} to {{.Through}}</td><td>{{t .FromTime}} to {{t .ThroughTime}}</td><td>{{.Recoverable}}</td><td>{{.Sealed}}</td><td class="bad">{{.Problem}}</td></tr>
{{end}}</table>{{else}}<p>No capture.</p>{{end}}
<h2>Drill</h2>
{{with .Drill}}<table>
<tr><th>backup</th><td>{{.BackupID}}</td></tr>
<tr><th>verdict</th><td>{{.State}}</td></tr>
<tr><th>started / finished</th><td>{{t .Started}} / {{t .Finished}}</td></tr>
<tr><th>RTO</th><td>{{.RTO}} s</td></tr>
{{if .Error}}<tr><th>error</th><td class="bad">{{.Error}}</td></tr>{{end}}
</table>{{else}}<p>Never drilled.</p>{{end}}
{{if .DrillDue}}<p>Next drill due {{t .DrillDue}}.</p>{{end}}
<h2>Recovery kit</h2>
{{with .Kit}}<p>{{.ID}}: soonest certificate expiry {{t .CertExpiry}} ({{.CertPath}}){{if .Error}} <span class="bad">{{.Error}}</span>{{end}}</p>{{else}}<p>None.</p>{{end}}
<h2>Agent</h2>
{{with .Agent}}<table>
<tr><th>agent</th><td>{{.Agent}} ({{.Mode}}{{if .Leader}}, leader{{else}}, standby{{end}}), version {{.Version}}</td></tr>
<tr><th>written / started</th><td>{{t .WrittenAt}} / {{t .Started}}</td></tr>
<tr><th>schedules</th><td>snapshot "{{.Schedules.Snapshot}}", prune "{{.Schedules.Prune}}", drill "{{.Schedules.Drill}}"</td></tr>
<tr><th>stale after</th><td>{{.StaleAfter}} s</td></tr>
{{with .Capture}}<tr><th>capture</th><td>every {{.Interval}} s, active {{.Active}}, through revision {{.Revision}} at {{t .RecoveryPoint}} {{.LastError}}</td></tr>{{end}}
</table>
<h3>Jobs</h3>
<table><tr><th>job</th><th>last attempt</th><th>result</th><th>last success</th><th>next run</th><th>error</th></tr>
{{range $name, $j := .Jobs}}<tr><td>{{$name}}</td><td>{{t $j.LastAttempt}}</td><td>{{$j.LastResult}}</td><td>{{t $j.LastSuccess}}</td><td>{{t $j.NextRun}}</td><td>{{$j.LastError}}</td></tr>{{end}}
</table>
{{if .Copies}}<h3>Copies</h3>
<table><tr><th>copy</th><th>last run</th><th>last success</th><th>recovery point</th><th>error</th></tr>
{{range .Copies}}<tr><td>{{.Name}}</td><td>{{t .LastRun}}</td><td>{{t .LastSuccess}}</td><td>{{t .RecoveryPoint}}</td><td>{{.LastError}}</td></tr>{{end}}
</table>{{end}}
{{else}}<p>No status document (an older agent): judged from its backups and drills.</p>{{end}}
{{range .AgentErrors}}<p class="bad">{{.}}</p>{{end}}
</body></html>
`))

// hubCollector exports the last report as lifeboat_fleet_* gauges,
// labelled by store and cluster (and problem kind): a cluster gone from
// the stores is gone from the metrics.
type hubCollector struct{ h *Hub }

var (
	labels      = []string{"store", "cluster"}
	descNewest  = prometheus.NewDesc("lifeboat_fleet_newest_backup_timestamp_seconds", "Creation time of the cluster's newest intact backup.", labels, nil)
	descDue     = prometheus.NewDesc("lifeboat_fleet_backup_stale_at_timestamp_seconds", "When the cluster's next backup is late by its own schedule (stale_after when earlier).", labels, nil)
	descRP      = prometheus.NewDesc("lifeboat_fleet_recovery_point_timestamp_seconds", "The newest time a restore of the cluster reaches (capture window or backup).", labels, nil)
	descDrill   = prometheus.NewDesc("lifeboat_fleet_drill_timestamp_seconds", "Start of the cluster's newest drill.", labels, nil)
	descPassed  = prometheus.NewDesc("lifeboat_fleet_drill_passed", "1 when the newest drill passed, 0 when it failed (absent when unknown or never).", labels, nil)
	descRTO     = prometheus.NewDesc("lifeboat_fleet_drill_recovery_seconds", "Recovery time measured by the newest passed drill.", labels, nil)
	descCert    = prometheus.NewDesc("lifeboat_fleet_kit_cert_expiry_timestamp_seconds", "Soonest certificate expiry in the newest backup's recovery kit.", labels, nil)
	descAgent   = prometheus.NewDesc("lifeboat_fleet_agent_seen_timestamp_seconds", "When the cluster's newest agent status document was written.", labels, nil)
	descProblem = prometheus.NewDesc("lifeboat_fleet_problem", "1 when the cluster has a problem of this kind at the last refresh, else 0.", []string{"store", "cluster", "kind"}, nil)
	descCount   = prometheus.NewDesc("lifeboat_fleet_clusters", "Clusters read at the last refresh.", nil, nil)
	descRefresh = prometheus.NewDesc("lifeboat_fleet_refresh_timestamp_seconds", "End of the last refresh.", nil, nil)
	descTook    = prometheus.NewDesc("lifeboat_fleet_refresh_duration_seconds", "How long the last refresh took.", nil, nil)
)

func (c hubCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descNewest, descDue, descRP, descDrill, descPassed, descRTO, descCert, descAgent, descProblem, descCount, descRefresh, descTook} {
		ch <- d
	}
}

func (c hubCollector) Collect(ch chan<- prometheus.Metric) {
	c.h.mu.Lock()
	r, at, took := c.h.report, c.h.refreshed, c.h.took
	c.h.mu.Unlock()
	if r == nil {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, lv ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, lv...)
	}
	ts := func(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }
	gauge(descCount, float64(len(r.Clusters)))
	gauge(descRefresh, ts(at))
	gauge(descTook, took.Seconds())
	for _, s := range r.Clusters {
		lv := []string{s.Store, s.Name}
		if s.Newest != nil {
			gauge(descNewest, ts(s.Newest.CreatedAt), lv...)
		}
		if s.StaleAt != nil {
			gauge(descDue, ts(*s.StaleAt), lv...)
		}
		if s.RecoveryPoint != nil {
			gauge(descRP, ts(*s.RecoveryPoint), lv...)
		}
		if d := s.Drill; d != nil {
			gauge(descDrill, ts(d.Started), lv...)
			switch d.State {
			case repository.DrillPassed:
				gauge(descPassed, 1, lv...)
				gauge(descRTO, float64(d.RTO), lv...)
			case repository.DrillFailed:
				gauge(descPassed, 0, lv...)
			}
		}
		if s.Kit != nil && !s.Kit.CertExpiry.IsZero() {
			gauge(descCert, ts(s.Kit.CertExpiry), lv...)
		}
		if s.Agent != nil {
			gauge(descAgent, ts(s.Agent.WrittenAt), lv...)
		}
		has := map[string]bool{}
		for _, p := range s.Problems {
			has[p.Kind] = true
		}
		for _, k := range ProblemKinds {
			v := 0.0
			if has[k] {
				v = 1
			}
			gauge(descProblem, v, s.Store, s.Name, k)
		}
	}
}
