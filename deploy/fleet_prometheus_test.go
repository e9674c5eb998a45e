package deploy

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Compressed time for the fleet's alert test: a snapshot schedule of
// 10 s stands for one of 10 minutes (60×). The agents' stale_after is
// 1.5 intervals, the deadline the hub gives a 10-minute schedule of its
// own (due after one interval, then half an interval of grace), and
// every `for:` of the fleet rules is divided by the same factor.
const (
	alertCompression = 60
	alertInterval    = 10 * time.Second
	alertStaleAfter  = 15 * time.Second
	alertRefresh     = time.Second
)

// TestFleetAlertInPrometheus: a real Prometheus (PROMETHEUS_BIN, built
// by make tools) scrapes a real hub (lifeboat fleet serve, the built
// binary) with the fleet rules of deploy/prometheus/fleet loaded. Two
// agent daemons (the built binary, against a real etcd) back up every
// 10 s; a third cluster backs up daily and its newest backup is 2 hours
// old. One agent is killed (SIGKILL, as when its node dies): its
// cluster's LifeboatFleetBackupStale fires, and no alert of the other two
// clusters fires or is pending — the daily cluster is not called stale.
// It logs the time from the agent's death to the alert firing (the
// target is 2 × the snapshot interval + 1 refresh; docs/benchmarks.md).
func TestFleetAlertInPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips the real Prometheus, hub and agents")
	}
	prom := etcdtest.NeedBinary(t, "PROMETHEUS_BIN", "prometheus")
	bin := lifeboatBinary(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	if _, err := c.Client(t).Put(t.Context(), "/registry/namespaces/default", "v"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	storeDir := filepath.Join(dir, "store")
	st, err := uploader.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	dailyCluster(t, st, time.Now().Add(-2*time.Hour))
	agents := map[string]*exec.Cmd{}
	for _, name := range []string{"alive", "killed"} {
		agents[name] = startProcess(t, dir, name, bin, "agent", "--cluster", name,
			"--endpoints", strings.Join(c.Endpoints(), ","), "--store", "file://"+storeDir,
			"--spool-dir", filepath.Join(dir, name, "spool"), "--scratch-dir", filepath.Join(dir, name, "scratch"),
			"--snapshot-schedule", fmt.Sprintf("@every %s", alertInterval), "--jitter", "0", "--run-at-start",
			"--drill-schedule", "", "--stale-after", alertStaleAfter.String(), "--lock=false",
			"--skip-unchanged-snapshots=false", "--listen", fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t)), "--log-format", "json")
	}
	hub := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	startProcess(t, dir, "hub", bin, "fleet", "serve", "--store", "file://"+storeDir, "--listen", hub,
		"--interval", alertRefresh.String(), "--log-format", "json")
	api := startPrometheus(t, prom, dir, hub)

	// Every cluster read, scraped and clean before the kill, and no alert
	// (LifeboatFleetHubStale is pending until the first scrape).
	waitProm(t, api, 90*time.Second, "all three clusters clean, no alert", func() (bool, string) {
		clean := promQuery(t, api, `sum by (cluster) (lifeboat_fleet_problem) == 0 and on (cluster) lifeboat_fleet_newest_backup_timestamp_seconds`)
		a := alerts(t, api)
		return len(clean) == 3 && len(a) == 0, fmt.Sprint(clean, a)
	})

	if err := agents["killed"].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var fired time.Time
	waitProm(t, api, 120*time.Second, "LifeboatFleetBackupStale of the killed cluster", func() (bool, string) {
		a := alerts(t, api)
		for _, x := range a {
			if x.Labels["cluster"] != "killed" {
				t.Fatalf("alert %s of cluster %q is %s: only the killed cluster's may be", x.Labels["alertname"], x.Labels["cluster"], x.State)
			}
			if x.Labels["alertname"] == "LifeboatFleetBackupStale" && x.State == "firing" && fired.IsZero() {
				fired = time.Now()
			}
		}
		return !fired.IsZero(), fmt.Sprint(a)
	})
	newest := promQuery(t, api, `lifeboat_fleet_newest_backup_timestamp_seconds{cluster="killed"}`)
	target := 2*alertInterval + alertRefresh
	t.Logf("the killed agent's alert fired %s after its death (target %s: 2 × its %s schedule + 1 refresh of %s), %s after its newest backup; compressed %d×: %s and %s for a 10-minute schedule",
		fired.Sub(killed).Round(100*time.Millisecond), target, alertInterval, alertRefresh,
		sinceSample(fired, newest), alertCompression,
		(fired.Sub(killed) * alertCompression).Round(time.Second), (target * alertCompression).Round(time.Second))

	// A while later the others are still clean: the daily cluster, its
	// newest backup 2 hours old, is not stale.
	time.Sleep(3 * alertRefresh)
	if bad := promQuery(t, api, `sum by (cluster) (lifeboat_fleet_problem{cluster!="killed"}) > 0`); len(bad) > 0 {
		t.Errorf("problems of the other clusters: %v", bad)
	}
	if got := promQuery(t, api, `lifeboat_fleet_problem{cluster="daily",kind="stale"} == 0`); len(got) != 1 {
		t.Errorf("the daily cluster's stale problem: %v, want present and 0", got)
	}
}

// dailyCluster stores a cluster backed up daily (@every 24h) whose newest
// backup was made at newest, and its agent's status document, written now.
func dailyCluster(t *testing.T, st uploader.Store, newest time.Time) {
	t.Helper()
	repo := repository.New(st, "daily")
	for _, at := range []time.Time{newest.Add(-24 * time.Hour), newest} {
		if err := repo.PutManifest(t.Context(), jobtest.PutObject(t, repo, at, uploader.PutOptions{})); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	if err := repo.PutAgentStatus(t.Context(), &repository.AgentStatus{Cluster: "daily", Agent: "daily-node/1", Version: "test",
		Mode: repository.AgentDaemon, WrittenAt: now, Started: now.Add(-48 * time.Hour), Every: 60, Leader: true,
		Schedules: repository.AgentSchedules{Snapshot: "@every 24h"}, StaleAfter: repository.SecondsOf(26 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
}

// startProcess starts bin with args, its output in dir/name.log (shown
// when the test fails), killed at cleanup.
func startProcess(t *testing.T, dir, name, bin string, args ...string) *exec.Cmd {
	t.Helper()
	logFile := filepath.Join(dir, name+".log")
	f, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = cleanEnv()
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		f.Close()
		if t.Failed() {
			out, _ := os.ReadFile(logFile)
			if len(out) > 8000 {
				out = out[len(out)-8000:]
			}
			t.Logf("%s's log (end):\n%s", name, out)
		}
	})
	return cmd
}

// startPrometheus runs a real Prometheus scraping the hub every second,
// evaluating the fleet rules (their `for:` compressed) every second, and
// returns its URL.
func startPrometheus(t *testing.T, bin, dir, hub string) string {
	t.Helper()
	rules := filepath.Join(dir, "fleet-alerts.yaml")
	if err := os.WriteFile(rules, compressedRules(t), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: lifeboat-fleet
    static_configs: [{targets: [%q]}]
`, rules, hub)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", freeTCPPort(t))
	startProcess(t, dir, "prometheus", bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+addr)
	api := "http://" + addr
	waitProm(t, api, 60*time.Second, "Prometheus ready with the fleet rules", func() (bool, string) {
		resp, err := http.Get(api + "/api/v1/rules")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		var r struct {
			Data struct {
				Groups []struct{ Rules []any } `json:"groups"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Data.Groups) == 0 {
			return false, fmt.Sprintf("rules: %v %+v", err, r)
		}
		return len(r.Data.Groups[0].Rules) > 0, ""
	})
	return api
}

// compressedRules is prometheus/fleet/alerts.yaml with every `for:`
// divided by alertCompression.
func compressedRules(t *testing.T) []byte {
	t.Helper()
	var f map[string]any
	data, err := os.ReadFile("prometheus/fleet/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f["groups"].([]any) {
		for _, r := range g.(map[string]any)["rules"].([]any) {
			rule := r.(map[string]any)
			if s, ok := rule["for"].(string); ok {
				d, err := model.ParseDuration(s)
				if err != nil {
					t.Fatalf("rule %v: for %q: %v", rule["alert"], s, err)
				}
				rule["for"] = (time.Duration(d) / alertCompression).String()
				n++
			}
		}
	}
	if n == 0 {
		t.Fatal("no rule of prometheus/fleet/alerts.yaml has a for: to compress")
	}
	out, err := yaml.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitProm polls cond every 100 ms until it holds, failing after within.
func waitProm(t *testing.T, api string, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (Prometheus %s): %s", what, within, api, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// promQuery runs an instant query; a Prometheus that is not up yet answers
// nothing.
func promQuery(t *testing.T, api, q string) []promSample {
	t.Helper()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []promSample `json:"result"`
		} `json:"data"`
	}
	promGet(t, api+"/api/v1/query?query="+url.QueryEscape(q), &r)
	return r.Data.Result
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alerts are the pending and firing alerts.
func alerts(t *testing.T, api string) []promAlert {
	t.Helper()
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	promGet(t, api+"/api/v1/alerts", &r)
	return r.Data.Alerts
}

func promGet(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
}

// sinceSample is the time from a timestamp sample's value to at.
func sinceSample(at time.Time, s []promSample) string {
	if len(s) != 1 {
		return "?"
	}
	var secs float64
	if _, err := fmt.Sscan(fmt.Sprint(s[0].Value[1]), &secs); err != nil {
		return "?"
	}
	return at.Sub(time.Unix(0, int64(secs*1e9))).Round(100 * time.Millisecond).String()
}

// freeTCPPort is a loopback port free a moment ago.
func freeTCPPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
