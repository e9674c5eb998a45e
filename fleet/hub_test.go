package fleet

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestHub: a hub over a real store answers 503 before its first
// refresh; then its metrics, JSON and page show every cluster, the
// quiet one with its problem (and only it), the page without script.
func TestHub(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	synthetic(t, st, "fresh", "aa01", now.Add(-30*time.Minute), now.Add(-20*time.Minute), now.Add(-10*time.Minute))
	synthetic(t, st, "quiet", "aa02", now.Add(-5*time.Hour), now.Add(-4*time.Hour), now.Add(-3*time.Hour))
	status(t, st, "fresh", "@every 10m", now)
	putDrill(t, st, "fresh", now.Add(-5*time.Minute), true)

	h := NewHub(HubConfig{Sources: []Source{{Name: "dir", Store: st}}}, nil)
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	if code, _ := get(t, srv.URL+"/api/v1/clusters"); code != http.StatusServiceUnavailable {
		t.Errorf("before the first refresh: %d, want 503", code)
	}
	if err := h.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}

	code, body := get(t, srv.URL+"/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	problem := map[string]float64{}
	for _, m := range mfs["lifeboat_fleet_problem"].GetMetric() {
		lv := map[string]string{}
		for _, l := range m.GetLabel() {
			lv[l.GetName()] = l.GetValue()
		}
		problem[lv["cluster"]+"/"+lv["kind"]] += m.GetGauge().GetValue()
	}
	for k, want := range map[string]float64{"quiet/stale": 1, "fresh/stale": 0, "quiet/agent_silent": 0, "fresh/drill_failed": 0} {
		if got, ok := problem[k]; !ok || got != want {
			t.Errorf("lifeboat_fleet_problem %s = %v (present %v), want %v", k, got, ok, want)
		}
	}
	if n := len(mfs["lifeboat_fleet_problem"].GetMetric()); n != 2*len(ProblemKinds) {
		t.Errorf("%d lifeboat_fleet_problem series, want %d (every kind for both clusters)", n, 2*len(ProblemKinds))
	}
	if got := mfs["lifeboat_fleet_clusters"].GetMetric()[0].GetGauge().GetValue(); got != 2 {
		t.Errorf("lifeboat_fleet_clusters %v", got)
	}
	if got := len(mfs["lifeboat_fleet_agent_seen_timestamp_seconds"].GetMetric()); got != 1 {
		t.Errorf("%d agent_seen series, want 1 (only fresh has an agent)", got)
	}
	promtoolCheck(t, body)

	code, body = get(t, srv.URL+"/api/v1/clusters?problems=1")
	var r Report
	if err := json.Unmarshal([]byte(body), &r); code != http.StatusOK || err != nil {
		t.Fatalf("/api/v1/clusters: %d %v\n%s", code, err, body)
	}
	if len(r.Clusters) != 1 || r.Clusters[0].Name != "quiet" || r.Clusters[0].Problems[0].Kind != ProblemStale {
		t.Errorf("/api/v1/clusters?problems=1: %s", body)
	}

	code, body = get(t, srv.URL+"/")
	if code != http.StatusOK || strings.Contains(body, "<script") {
		t.Fatalf("/: %d, or a script in it:\n%s", code, body)
	}
	q, f := strings.Index(body, `">quiet</a>`), strings.Index(body, `">fresh</a>`)
	if q < 0 || f < 0 || q > f || !strings.Contains(body, `<tr class="problem"><td>dir</td><td><a href=`) || !strings.Contains(body, "1 of 2 clusters with problems") {
		t.Errorf("the page does not list quiet (a problem row) before fresh:\n%s", body)
	}

	// Each cluster's own page, by the link in its row.
	links := regexp.MustCompile(`<a href="(/cluster\?[^"]+)">(\w+)</a>`).FindAllStringSubmatch(body, -1)
	if len(links) != 2 {
		t.Fatalf("links to the clusters' pages: %v", links)
	}
	for _, l := range links {
		code, page := get(t, srv.URL+html.UnescapeString(l[1]))
		want := map[string][]string{
			"quiet": {"<b>stale</b>", "No status document"},
			"fresh": {"fresh-node/1", `snapshot "@every 10m"`, "<p>None.</p>"},
		}[l[2]]
		// Every backup listed, newest first, the newest with its drill.
		ids := jobtest.Manifests(t, repository.New(st, l[2]))
		slices.Reverse(ids)
		for i, id := range ids {
			row := "<tr><td>" + id + "</td>"
			if l[2] == "fresh" && i == 0 {
				row += `<td>` + now.Add(-10*time.Minute).UTC().Format(time.RFC3339) + `</td><td>`
			}
			want = append(want, row)
		}
		if l[2] == "fresh" {
			want = append(want, `<span>passed</span> `+now.Add(-5*time.Minute).UTC().Format(time.RFC3339)+", RTO 9 s")
		}
		if i := strings.Index(page, "<tr><td>"+ids[0]); i < 0 || i > strings.Index(page, "<tr><td>"+ids[len(ids)-1]) {
			t.Errorf("page of %s: backups not newest first", l[2])
		}
		for _, w := range want {
			if code != http.StatusOK || !strings.Contains(page, w) || strings.Contains(page, "<script") {
				t.Errorf("page of %s (%d) lacks %q:\n%s", l[2], code, w, page)
			}
		}
	}
	if code, _ := get(t, srv.URL+"/cluster?store=dir&name=nope"); code != http.StatusNotFound {
		t.Errorf("page of an unknown cluster: %d, want 404", code)
	}
}

// promtoolCheck lints the scrape with promtool check metrics (as the
// agent's TestMetricsLint does): skipped without promtool, except under
// CI=true.
func promtoolCheck(t *testing.T, body string) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found; CI=true requires it")
		}
		t.Log("promtool not found: metric lint skipped")
		return
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader([]byte(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// TestHubRun: Run reads at once and again at each interval (driven by
// the test), sees a cluster that appeared in between, and returns nil
// when its context ends.
func TestHubRun(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	synthetic(t, st, "first", "aa01", time.Now().Add(-time.Minute))
	tick := make(chan time.Time)
	h := NewHub(HubConfig{Sources: []Source{{Name: "dir", Store: st}}, After: func(time.Duration) <-chan time.Time { return tick }}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	waitClusters := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for r := h.Report(); r == nil || len(r.Clusters) != n; r = h.Report() {
			if time.Now().After(deadline) {
				t.Fatalf("no report with %d clusters within 10s", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitClusters(1)
	synthetic(t, st, "second", "aa02", time.Now().Add(-time.Minute))
	tick <- time.Now()
	waitClusters(2)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// TestHubRunPhase: the wait between refreshes counts from a refresh's
// start, not its end, so a slow refresh does not push every later one
// (and the alerts it feeds) later by its own duration.
func TestHubRunPhase(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	synthetic(t, st, "first", "aa01", time.Now().Add(-time.Minute))
	waits := make(chan time.Duration, 1)
	after := func(d time.Duration) <-chan time.Time {
		select {
		case waits <- d:
		default:
		}
		return make(chan time.Time)
	}
	h := NewHub(HubConfig{Sources: []Source{{Name: "dir", Store: st}}, Interval: time.Hour, After: after}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	d := <-waits
	cancel()
	<-done
	if d >= time.Hour {
		t.Errorf("wait after a refresh = %v, want the interval less the refresh's duration", d)
	}
}
