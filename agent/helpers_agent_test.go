package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The fixtures the jobs' tests share (internal/jobtest), under the names
// these tests use.
const testCluster = jobtest.Cluster

var (
	testLogger = jobtest.Logger
	manifests  = jobtest.Manifests
	dirEntries = jobtest.DirEntries
	bucketSeq  atomic.Int64
)

// fixture is a real etcd cluster with Kubernetes-like data and a store
// (jobtest.Fixture).
type fixture struct {
	etcd    *etcdtest.Cluster
	backups *repository.Repo
	spool   string
	scratch string
}

func newFixture(t *testing.T, st uploader.Store, objects int) *fixture {
	t.Helper()
	f := jobtest.NewFixture(t, st, objects)
	return &fixture{etcd: f.Etcd, backups: f.Backups, spool: f.Spool, scratch: f.Scratch}
}

func (f *fixture) etcdConfig() snapshot.Config {
	return snapshot.Config{Endpoints: f.etcd.Endpoints()}
}

// config is an agent with every job on an @every 1s schedule, the real
// snapshot, prune (keep the last 2) and drill (drill.Run) jobs, and
// HTTP on a free port. Callers adjust it.
func (f *fixture) config(t *testing.T, lg *slog.Logger) Config {
	t.Helper()
	dj := drill.Job{Backups: f.backups, Target: "latest", Options: drill.Options{ScratchDir: f.scratch, Timeout: 2 * time.Minute, Version: "test"}}
	return Config{
		Cluster: testCluster,
		Backups: f.backups,
		Snapshot: &backup.Job{
			Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups,
			Encoding: repository.Encoding{Compression: "zstd"}, Version: "test",
		},
		Prune:           &prune.Job{Backups: f.backups, Policy: retention.Policy{Last: 2}, OrphanGrace: time.Hour},
		Drill:           func(ctx context.Context) (*drill.Outcome, error) { return drill.RunJob(ctx, dj, lg) },
		Schedules:       Schedules{Snapshot: "@every 1s", Prune: "@every 1s", Drill: "@every 1s"},
		RetryBackoff:    100 * time.Millisecond,
		ShutdownTimeout: 30 * time.Second,
		StaleAfter:      time.Hour,
		Listen:          "127.0.0.1:0",
		Identity:        "agent-" + t.Name(),
		Version:         "test",
	}
}

// running is an agent whose Run goroutine is going.
type running struct {
	*Agent
	cancel context.CancelFunc
	done   chan error
	url    string
}

// start creates the agent and runs it until stop (or test cleanup).
func start(t *testing.T, cfg Config, lg *slog.Logger) *running {
	t.Helper()
	a, err := New(cfg, lg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{Agent: a, cancel: cancel, done: make(chan error, 1)}
	if a.Addr() != nil {
		r.url = "http://" + a.Addr().String()
	}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the agent (what SIGTERM does) and returns Run's error and
// how long Run took to return.
func (r *running) stop(t *testing.T) (error, time.Duration) {
	t.Helper()
	if r.done == nil {
		return nil, 0
	}
	begin := time.Now()
	r.cancel()
	select {
	case err := <-r.done:
		r.done = nil
		return err, time.Since(begin)
	case <-time.After(2 * time.Minute):
		t.Fatal("Run did not return within 2 minutes of cancellation")
		return nil, 0
	}
}

// scrape fetches and parses /metrics.
func scrape(t *testing.T, baseURL string) (map[string]*dto.MetricFamily, []byte) {
	t.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s %v", resp.Status, err)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse scrape: %v\n%s", err, body)
	}
	return mfs, body
}

// value returns the value of the series of name with the given label
// pairs (a histogram's sample count); ok is false when it is absent.
func value(mfs map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	mf := mfs[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, lp := range m.GetLabel() {
				if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		case m.Untyped != nil:
			return m.Untyped.GetValue(), true
		}
	}
	return 0, false
}

// must returns the value or fails.
func must(t *testing.T, mfs map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	v, ok := value(mfs, name, labels...)
	if !ok {
		t.Fatalf("metric %s%v is missing", name, labels)
	}
	return v
}

// gather reads a registry directly.
func gather(t *testing.T, g prometheus.Gatherer) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// waitFor polls cond every 100ms until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// getStatus fetches /status.
func getStatus(t *testing.T, baseURL string) Status {
	t.Helper()
	resp, err := http.Get(baseURL + "/status")
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	defer resp.Body.Close()
	var st Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatalf("status: %v", err)
	}
	return st
}

func httpCode(t *testing.T, url string) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// promtoolCheck runs `promtool check metrics` on a scrape. Without
// promtool the check is skipped, except under CI=true where it fails.
func promtoolCheck(t *testing.T, body []byte) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found (install Debian's prometheus package); CI=true requires it")
		}
		t.Log("promtool not found: metric lint skipped")
		return
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}

// fakeClock is a Clock the test moves by hand.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []fakeWaiter
}

type fakeWaiter struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(t time.Time) *fakeClock { return &fakeClock{now: t} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, fakeWaiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock and fires the timers that are due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// hasWaiter reports whether a timer is due exactly at t.
func (c *fakeClock) hasWaiter(t time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range c.waiters {
		if w.at.Equal(t) {
			return true
		}
	}
	return false
}

func containsAny(s string, subs ...string) string {
	for _, x := range subs {
		if x != "" && strings.Contains(s, x) {
			return x
		}
	}
	return ""
}
