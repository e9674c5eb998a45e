package deploy

import (
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

	"github.com/lifeboat-dev/lifeboat/fleet"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestFleetAlertRules: the fleet rules are LifeboatFleet*, each with a
// runbook entry; they select only metrics the hub exports (scraped from
// a real hub); every problem kind the hub decides is covered by one
// rule and no rule names a kind it does not; promtool checks and tests
// them (prometheus/fleet/alerts_test.yaml).
func TestFleetAlertRules(t *testing.T) {
	var f ruleFile
	decodeYAML(t, "prometheus/fleet/alerts.yaml", &f)
	runbook, err := os.ReadFile("prometheus/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	exported := hubMetrics(t)
	kindRe := regexp.MustCompile(`kind(=~|=)"([^"]+)"`)
	covered := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if !strings.HasPrefix(r.Alert, "LifeboatFleet") {
				t.Errorf("alert %s: fleet alerts are named LifeboatFleet…", r.Alert)
			}
			if !strings.Contains(string(runbook), "\n## "+r.Alert+"\n") || !strings.HasSuffix(r.Annotations["runbook_url"], "#"+strings.ToLower(r.Alert)) {
				t.Errorf("alert %s: no runbook entry, or runbook_url %q does not point at it", r.Alert, r.Annotations["runbook_url"])
			}
			for _, n := range metricNames(r.Expr) {
				if !slices.Contains(exported, n) {
					t.Errorf("alert %s selects %s, which the hub does not export (%v)", r.Alert, n, exported)
				}
			}
			for _, m := range kindRe.FindAllStringSubmatch(r.Expr, -1) {
				for _, k := range strings.Split(m[2], "|") {
					if !slices.Contains(fleet.ProblemKinds, k) {
						t.Errorf("alert %s names kind %q, which the hub never decides", r.Alert, k)
					}
					if other, ok := covered[k]; ok {
						t.Errorf("kind %s is covered by %s and %s", k, other, r.Alert)
					}
					covered[k] = r.Alert
				}
			}
		}
	}
	for _, k := range fleet.ProblemKinds {
		if covered[k] == "" {
			t.Errorf("no fleet alert for problem kind %s", k)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found; CI=true requires it")
		}
		t.Skip("promtool not found: promtool check and test rules skipped")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "prometheus/fleet"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// hubMetrics are the metric names a real hub exports over a store with
// one cluster that has every series (a backup, a passed drill, an agent).
func hubMetrics(t *testing.T) []string {
	t.Helper()
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	repo := repository.New(st, "prod")
	now := time.Now().UTC()
	id := repository.NewID(now.Add(-time.Minute), 10)
	key := repo.ObjectKey(id, repository.Encoding{Compression: "none"})
	info, err := st.Put(t.Context(), key, strings.NewReader("data"), uploader.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m := &repository.Manifest{Format: repository.ManifestFormat, ID: id, Cluster: "prod", EtcdClusterID: "cdf818194e3a8c32", EtcdMemberID: "8e9e05c52164694d",
		Endpoint: "http://127.0.0.1:2379", EtcdVersion: "3.7.3", CreatedAt: now.Add(-time.Minute), Revision: 10, TotalKeys: 1, DBSize: 4,
		SnapshotSHA256: strings.Repeat("0", 64), HashKVStatus: "match", Object: key, ObjectSize: info.Size, ObjectSHA256: info.SHA256,
		Compression: "none", Encryption: "none", AgentVersion: "test"}
	if err := repo.PutManifest(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	if err := repo.PutDrillReport(t.Context(), &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: id, Cluster: "prod",
		StartedAt: now.Add(-30 * time.Second), FinishedAt: now, Passed: true, RecoverySeconds: 3}); err != nil {
		t.Fatal(err)
	}
	if err := repo.PutAgentStatus(t.Context(), &repository.AgentStatus{Cluster: "prod", Agent: "a", Mode: repository.AgentDaemon, WrittenAt: now, Every: 60,
		Schedules: repository.AgentSchedules{Snapshot: "@every 10m"}}); err != nil {
		t.Fatal(err)
	}
	h := fleet.NewHub(fleet.HubConfig{Sources: []fleet.Source{{Name: "dir", Store: st}}}, nil)
	if err := h.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var names []string
	for line := range strings.Lines(string(body)) {
		if name, ok := strings.CutPrefix(line, "# TYPE "); ok {
			names = append(names, strings.Fields(name)[0])
		}
	}
	return names
}
