package deploy

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/kit"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// lifeboatMetrics are the metrics lifeboat agent exports (docs/agent.md
// documents each): the alert rules and the dashboard may select these,
// and TestAgentExportsMetrics proves the binary exports exactly these.
var lifeboatMetrics = []string{
	"lifeboat_job_last_success_timestamp_seconds",
	"lifeboat_job_runs_total",
	"lifeboat_job_duration_seconds", // histogram
	"lifeboat_snapshot_size_bytes",
	"lifeboat_snapshot_revision",
	"lifeboat_snapshot_hashkv_errors_total",
	"lifeboat_snapshot_unchanged_total",
	"lifeboat_backups",
	"lifeboat_untrusted_objects",
	"lifeboat_lineages",
	"lifeboat_backup_newest_timestamp_seconds",
	"lifeboat_backup_newest_proven_timestamp_seconds",
	"lifeboat_drill_last_result",
	"lifeboat_drill_last_timestamp_seconds",
	"lifeboat_drill_phase_duration_seconds",
	"lifeboat_drill_recovery_seconds",
	"lifeboat_drill_errors_total",
	"lifeboat_drill_last_error_timestamp_seconds",
	"lifeboat_kit_cert_expiry_timestamp_seconds",
	"lifeboat_retention_deleted_total",
	"lifeboat_upload_bytes_total",
	"lifeboat_leader",
	"lifeboat_store_up",
	"lifeboat_notifications_total",
	"lifeboat_kubernetes_sync_failures_total",
	"lifeboat_build_info",
	"lifeboat_capture_enabled",
	"lifeboat_capture_up",
	"lifeboat_capture_revision",
	"lifeboat_capture_recovery_point_timestamp_seconds",
	"lifeboat_capture_lag_seconds",
	"lifeboat_capture_gaps_total",
	"lifeboat_capture_restarts_total",
	"lifeboat_capture_window_problems",
	"lifeboat_capture_rollovers_total",
	"lifeboat_capture_compacted_segments_total",
	"lifeboat_capture_compaction_errors_total",
	"lifeboat_copy_last_success_timestamp_seconds",
	"lifeboat_copy_failures_total",
	"lifeboat_copy_recovery_point_timestamp_seconds",
	"lifeboat_copy_bytes_total",
	"lifeboat_copy_drill_last_timestamp_seconds",
	"lifeboat_copy_drill_last_result",
	"lifeboat_scrub_bytes_read_total",
	"lifeboat_scrub_objects_checked_total",
	"lifeboat_scrub_damaged_objects",
	"lifeboat_scrub_not_checked_objects",
	"lifeboat_scrub_last_success_timestamp_seconds",
}

// afterCopyDrill are the metrics absent until a copy was drilled (a
// verdict, not a default): TestAgentExportsMetrics's one cycle drills
// the primary.
var afterCopyDrill = []string{"lifeboat_copy_drill_last_result"}

// otherMetrics come from Prometheus (up) or from the Go and process
// collectors of the daemon (agent --once leaves those out).
var otherMetrics = []string{"up", "go_goroutines", "process_resident_memory_bytes", "process_cpu_seconds_total"}

// targetLabels are attached by Prometheus or the Pushgateway, not by
// lifeboat.
var targetLabels = []string{"instance", "job", "pod", "namespace", "service", "cluster"}

// knownMetric reports whether name is a metric the rules may use,
// including a histogram's series.
func knownMetric(name string) bool {
	if slices.Contains(lifeboatMetrics, name) || slices.Contains(otherMetrics, name) {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && base == "lifeboat_job_duration_seconds" {
			return true
		}
	}
	return false
}

// baseMetric maps a histogram series to its family.
func baseMetric(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(lifeboatMetrics, base) {
			return base
		}
	}
	return name
}

// query is one PromQL expression and where it comes from.
type query struct {
	where string
	expr  string
}

// ruleFile is the shape of a Prometheus rule file (the subset used here).
type ruleFile struct {
	Groups []ruleGroup `yaml:"groups" json:"groups"`
}

type ruleGroup struct {
	Name  string `yaml:"name" json:"name"`
	Rules []rule `yaml:"rules" json:"rules"`
}

type rule struct {
	Alert       string            `yaml:"alert" json:"alert"`
	Expr        string            `yaml:"expr" json:"expr"`
	For         string            `yaml:"for" json:"for"`
	Labels      map[string]string `yaml:"labels" json:"labels"`
	Annotations map[string]string `yaml:"annotations" json:"annotations"`
}

func decodeYAML(t *testing.T, file string, v any) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

func alertRules(t *testing.T) []rule {
	t.Helper()
	var f ruleFile
	decodeYAML(t, "prometheus/alerts.yaml", &f)
	var rules []rule
	for _, g := range f.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	return rules
}

// dashboard is the part of a Grafana dashboard the tests look at.
type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string          `json:"name"`
			Type       string          `json:"type"`
			Query      json.RawMessage `json:"query"`
			Definition string          `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int               `json:"id"`
	Type       string            `json:"type"`
	Title      string            `json:"title"`
	Datasource map[string]string `json:"datasource"`
	GridPos    struct{ H, W, X, Y int }
	Targets    []struct {
		Expr       string            `json:"expr"`
		RefID      string            `json:"refId"`
		Datasource map[string]string `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("grafana/lifeboat.json")
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(data) {
		t.Fatal("grafana/lifeboat.json is not valid JSON")
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/lifeboat.json: %v", err)
	}
	return d
}

func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// queries returns every PromQL expression of the alert rules and the
// dashboard.
func queries(t *testing.T) []query {
	t.Helper()
	var qs []query
	for _, r := range alertRules(t) {
		qs = append(qs, query{"alerts.yaml " + r.Alert, r.Expr})
	}
	d := loadDashboard(t)
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			qs = append(qs, query{fmt.Sprintf("lifeboat.json panel %q %s", p.Title, tg.RefID), tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		// label_values(SELECTOR, LABEL): the selector is PromQL.
		m := labelValues.FindStringSubmatch(strings.TrimSpace(v.Definition))
		if m == nil {
			t.Errorf("lifeboat.json variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		qs = append(qs, query{"lifeboat.json variable " + v.Name, m[1]})
	}
	return qs
}

func TestQueriesUseKnownMetrics(t *testing.T) {
	qs := queries(t)
	if len(qs) < 20 {
		t.Fatalf("only %d queries found", len(qs))
	}
	for _, q := range qs {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: selects no metric: %q", q.where, q.expr)
		}
		for _, n := range names {
			if !knownMetric(n) {
				t.Errorf("%s: unknown metric %q in %q", q.where, n, q.expr)
			}
		}
	}
}

func TestAlertRules(t *testing.T) {
	runbook, err := os.ReadFile("prometheus/runbook.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for line := range strings.Lines(string(runbook)) {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[strings.ToLower(strings.TrimSpace(h))] = true
		}
	}
	cases := promtoolCases(t)
	seen := map[string]bool{}
	for _, r := range alertRules(t) {
		t.Run(r.Alert, func(t *testing.T) {
			if !regexp.MustCompile(`^Lifeboat[A-Z][A-Za-z]+$`).MatchString(r.Alert) {
				t.Errorf("alert name %q is not LifeboatCamelCase", r.Alert)
			}
			if seen[r.Alert] {
				t.Errorf("duplicate alert %s", r.Alert)
			}
			seen[r.Alert] = true
			if s := r.Labels["severity"]; s != "critical" && s != "warning" {
				t.Errorf("severity %q, want critical or warning", s)
			}
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if r.Annotations[a] == "" {
					t.Errorf("no %s annotation", a)
				}
			}
			u, err := url.Parse(r.Annotations["runbook_url"])
			switch {
			case err != nil:
				t.Errorf("runbook_url: %v", err)
			case !strings.HasSuffix(u.Path, "/deploy/prometheus/runbook.md"):
				t.Errorf("runbook_url %q does not point at deploy/prometheus/runbook.md", u)
			case u.Fragment != strings.ToLower(r.Alert) || !anchors[u.Fragment]:
				t.Errorf("runbook_url fragment %q: want #%s and a '## %s' section in runbook.md", u.Fragment, strings.ToLower(r.Alert), r.Alert)
			}
			c := cases[r.Alert]
			if c.fires == 0 || c.silent == 0 {
				t.Errorf("promtool cases: %d firing and %d silent, want at least one of each", c.fires, c.silent)
			}
		})
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("promtool cases for unknown alert %s", name)
		}
	}
}

type caseCount struct{ fires, silent int }

// promtoolCases counts, per alert, the promtool cases that expect it to
// fire and those that expect silence.
func promtoolCases(t *testing.T) map[string]caseCount {
	t.Helper()
	type testFile struct {
		RuleFiles          []string `yaml:"rule_files"`
		EvaluationInterval string   `yaml:"evaluation_interval"`
		Tests              []struct {
			Name        string `yaml:"name"`
			Interval    string `yaml:"interval"`
			InputSeries []struct {
				Series string `yaml:"series"`
				Values string `yaml:"values"`
			} `yaml:"input_series"`
			AlertRuleTests []struct {
				EvalTime  string `yaml:"eval_time"`
				Alertname string `yaml:"alertname"`
				ExpAlerts []struct {
					ExpLabels      map[string]string `yaml:"exp_labels"`
					ExpAnnotations map[string]string `yaml:"exp_annotations"`
				} `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	out := map[string]caseCount{}
	files, err := filepath.Glob("prometheus/*_test.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no promtool test files: %v", err)
	}
	for _, f := range files {
		var tf testFile
		decodeYAML(t, f, &tf)
		if !slices.Equal(tf.RuleFiles, []string{"alerts.yaml"}) {
			t.Errorf("%s: rule_files %v, want [alerts.yaml]", f, tf.RuleFiles)
		}
		for _, tc := range tf.Tests {
			for _, a := range tc.AlertRuleTests {
				c := out[a.Alertname]
				if len(a.ExpAlerts) > 0 {
					c.fires++
				} else {
					c.silent++
				}
				out[a.Alertname] = c
			}
		}
	}
	return out
}

func TestPrometheusRuleMatchesAlerts(t *testing.T) {
	var pr struct {
		APIVersion string `yaml:"apiVersion"`
		Kind       string `yaml:"kind"`
		Metadata   struct {
			Name   string            `yaml:"name"`
			Labels map[string]string `yaml:"labels"`
		} `yaml:"metadata"`
		Spec ruleFile `yaml:"spec"`
	}
	decodeYAML(t, "prometheus/prometheusrule.yaml", &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("%s %s, want monitoring.coreos.com/v1 PrometheusRule", pr.APIVersion, pr.Kind)
	}
	var alerts ruleFile
	decodeYAML(t, "prometheus/alerts.yaml", &alerts)
	if diff := cmp.Diff(pr.Spec, alerts); diff != "" {
		t.Errorf("prometheusrule.yaml differs from alerts.yaml (run prometheus/prometheusrule.sh > prometheus/prometheusrule.yaml) (-rule +alerts):\n%s", diff)
	}
}

func TestDashboard(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard has no uid or title")
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	if !vars["datasource"] {
		t.Error("no datasource variable: the dashboard would be bound to one Prometheus")
	}
	ids := map[int]bool{}
	var titles []string
	for _, p := range allPanels(d.Panels) {
		if ids[p.ID] {
			t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q: gridPos %+v does not fit 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		titles = append(titles, p.Title)
		if p.Datasource["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q: no queries", p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q: empty query %s", p.Title, tg.RefID)
			}
			for _, m := range regexp.MustCompile(`\$\{?([a-zA-Z_]+)`).FindAllStringSubmatch(tg.Expr, -1) {
				if !vars[m[1]] && !strings.HasPrefix(m[1], "__") {
					t.Errorf("panel %q: query uses undefined variable $%s", p.Title, m[1])
				}
			}
		}
	}
	// What the issue asks the dashboard to show.
	for _, want := range []string{"Backups over time", "Snapshot size", "Job durations",
		"Recovery time trend", "Drill verdicts", "Store contents by state"} {
		if !slices.Contains(titles, want) {
			t.Errorf("no panel %q (have %q)", want, titles)
		}
	}
}

// unitFile parses a systemd unit into key -> values (repeated keys append).
func unitFile(t *testing.T, file string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == ';' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: bad line %q", file, line)
		}
		out[k] = append(out[k], v)
	}
	return out
}

// syscallAllowed evaluates SystemCallFilter= lines as systemd does for the
// system call name, which belongs to groups (e.g. @resources, and the
// groups that include it): the first line sets the default (an allow list
// denies everything else, a ~deny list allows it), then each line that
// names the call or one of its groups allows it (or, with ~, denies it),
// the last one winning.
func syscallAllowed(lines []string, name string, groups ...string) bool {
	allowed := len(lines) == 0 || strings.HasPrefix(lines[0], "~")
	for _, line := range lines {
		deny := strings.HasPrefix(line, "~")
		for _, item := range strings.Fields(strings.TrimPrefix(line, "~")) {
			if item == name || slices.Contains(groups, item) {
				allowed = !deny
			}
		}
	}
	return allowed
}

// TestSystemdWiring: the units hand the service the files config.yaml
// names, run it with that config, and keep its directories writable.
func TestSystemdWiring(t *testing.T) {
	var cfg struct {
		Etcd struct {
			CACert string `yaml:"cacert"`
			Cert   string `yaml:"cert"`
			Key    string `yaml:"key"`
		} `yaml:"etcd"`
		Snapshot struct {
			SpoolDir string `yaml:"spool_dir"`
		} `yaml:"snapshot"`
		Drill struct {
			ScratchDir string `yaml:"scratch_dir"`
		} `yaml:"drill"`
	}
	data, err := os.ReadFile("systemd/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{"lifeboat.service", "lifeboat-once.service"} {
		t.Run(unit, func(t *testing.T) {
			u := unitFile(t, filepath.Join("systemd", unit))
			creds := map[string]string{}
			for _, lc := range u["LoadCredential"] {
				id, src, _ := strings.Cut(lc, ":")
				creds[id] = src
			}
			env := map[string]string{}
			for _, e := range u["Environment"] {
				k, v, _ := strings.Cut(e, "=")
				env[k] = v
			}
			paths := map[string]string{"etcd.cacert": cfg.Etcd.CACert, "etcd.cert": cfg.Etcd.Cert, "etcd.key": cfg.Etcd.Key}
			for key, p := range paths {
				if v, ok := env["LIFEBOAT_"+strings.ToUpper(strings.ReplaceAll(key, ".", "_"))]; ok {
					p = v
				}
				dir, id := filepath.Split(p)
				if dir != "/run/credentials/"+unit+"/" || creds[id] == "" {
					t.Errorf("%s %q is not a credential of %s (LoadCredential ids %v)", key, p, unit, creds)
				}
				if !strings.HasPrefix(creds[id], "/etc/kubernetes/pki/etcd/") {
					t.Errorf("credential %s comes from %q, want kubeadm's /etc/kubernetes/pki/etcd", id, creds[id])
				}
			}
			exec := strings.Join(u["ExecStart"], " ")
			if !strings.HasPrefix(exec, "/usr/local/bin/lifeboat agent") || !strings.Contains(exec, "--config /etc/lifeboat/config.yaml") {
				t.Errorf("ExecStart %q: want /usr/local/bin/lifeboat agent --config /etc/lifeboat/config.yaml", exec)
			}
			state := u["StateDirectory"]
			for _, dir := range []string{cfg.Snapshot.SpoolDir, cfg.Drill.ScratchDir} {
				if !slices.Contains(state, "lifeboat") || !strings.HasPrefix(dir, "/var/lib/lifeboat/") {
					t.Errorf("%s is outside StateDirectory=lifeboat (/var/lib/lifeboat): ProtectSystem=strict makes it read-only", dir)
				}
			}
			if got := u["ProtectSystem"]; !slices.Equal(got, []string{"strict"}) {
				t.Errorf("ProtectSystem=%v, want strict", got)
			}
			if got := u["User"]; !slices.Equal(got, []string{"lifeboat"}) {
				t.Errorf("User=%v, want lifeboat (lifeboat.sysusers)", got)
			}
			// The compression thread lowers its own priority
			// (agent/priority_linux.go): @resources is denied, setpriority
			// must be allowed again.
			if !syscallAllowed(u["SystemCallFilter"], "setpriority", "@resources", "@system-service") {
				t.Errorf("SystemCallFilter=%q refuses setpriority, which lifeboat calls; allow it (SystemCallFilter=setpriority after the deny list)", u["SystemCallFilter"])
			}
			// The drill's children install a seccomp filter that skips
			// their fsyncs (restore/nosync_linux.go); seccomp is in no
			// group of @system-service.
			if !syscallAllowed(u["SystemCallFilter"], "seccomp") {
				t.Errorf("SystemCallFilter=%q refuses seccomp, which a drill's children call; allow it (SystemCallFilter=seccomp)", u["SystemCallFilter"])
			}
		})
	}
	sysusers, err := os.ReadFile("systemd/lifeboat.sysusers")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^u lifeboat `).Match(sysusers) {
		t.Error("lifeboat.sysusers does not create the user lifeboat")
	}
}

// TestSystemdFleet: the hub's unit runs lifeboat fleet serve with
// fleet.yaml, keeps the cache and the drills' scratch space in its
// StateDirectory (ProtectSystem=strict leaves nothing else writable),
// runs as the lifeboat user with no capability, and lets the drills'
// children install their seccomp filter.
func TestSystemdFleet(t *testing.T) {
	var cfg struct {
		Fleet struct {
			CacheDir string `yaml:"cache_dir"`
		} `yaml:"fleet"`
		Drill struct {
			ScratchDir string `yaml:"scratch_dir"`
		} `yaml:"drill"`
	}
	data, err := os.ReadFile("systemd/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	u := unitFile(t, "systemd/lifeboat-fleet.service")
	exec := strings.Join(u["ExecStart"], " ")
	if !strings.HasPrefix(exec, "/usr/local/bin/lifeboat fleet serve") || !strings.Contains(exec, "--config /etc/lifeboat/fleet.yaml") {
		t.Errorf("ExecStart %q: want /usr/local/bin/lifeboat fleet serve --config /etc/lifeboat/fleet.yaml", exec)
	}
	for _, dir := range []string{cfg.Fleet.CacheDir, cfg.Drill.ScratchDir} {
		if !slices.Equal(u["StateDirectory"], []string{"lifeboat-fleet"}) || !strings.HasPrefix(dir, "/var/lib/lifeboat-fleet/") {
			t.Errorf("%q is outside StateDirectory=lifeboat-fleet (%v): ProtectSystem=strict makes it read-only", dir, u["StateDirectory"])
		}
	}
	for k, want := range map[string]string{"ProtectSystem": "strict", "User": "lifeboat", "CapabilityBoundingSet": "", "StateDirectoryMode": "0700", "UMask": "0077"} {
		if got := u[k]; !slices.Equal(got, []string{want}) {
			t.Errorf("%s=%q, want %q", k, got, want)
		}
	}
	if !syscallAllowed(u["SystemCallFilter"], "seccomp") {
		t.Errorf("SystemCallFilter=%q refuses seccomp, which a drill's children call", u["SystemCallFilter"])
	}
}

// TestSystemdKit: the units keep what the recovery kit reads (kubeadm's PKI
// and kube-apiserver manifest, k3s's server files) read-only, and the
// kit's drop-in grants the one capability that reads kubeadm's 0600 keys,
// nothing more, with the same read-only paths. (check.sh scores each
// service with the drop-in applied.)
func TestSystemdKit(t *testing.T) {
	covered := func(paths []string, p string) bool {
		for _, field := range paths {
			for _, rp := range strings.Fields(field) {
				rp = strings.TrimPrefix(rp, "-")
				if p == rp || strings.HasPrefix(p, rp+"/") {
					return true
				}
			}
		}
		return false
	}
	kitPaths := []string{kit.KubeadmPKI, kit.KubeadmAPIServer, kit.K3sServer + "/token", kit.K3sServer + "/tls"}
	for _, unit := range []string{"lifeboat.service", "lifeboat-once.service", "lifeboat-kit.conf"} {
		u := unitFile(t, filepath.Join("systemd", unit))
		for _, p := range kitPaths {
			if !covered(u["ReadOnlyPaths"], p) {
				t.Errorf("%s: ReadOnlyPaths=%q does not cover %s, which the kit reads", unit, u["ReadOnlyPaths"], p)
			}
		}
		for _, k := range []string{"ReadWritePaths", "BindPaths"} {
			for _, p := range kitPaths {
				if covered(u[k], p) {
					t.Errorf("%s: %s=%q makes %s writable", unit, k, u[k], p)
				}
			}
		}
	}
	d := unitFile(t, "systemd/lifeboat-kit.conf")
	for _, k := range []string{"AmbientCapabilities", "CapabilityBoundingSet"} {
		if got := d[k]; !slices.Equal(got, []string{"CAP_DAC_READ_SEARCH"}) {
			t.Errorf("lifeboat-kit.conf: %s=%q, want only CAP_DAC_READ_SEARCH (reads any file, writes none)", k, got)
		}
	}
	for k := range d {
		if !slices.Contains([]string{"AmbientCapabilities", "CapabilityBoundingSet", "ReadOnlyPaths"}, k) {
			t.Errorf("lifeboat-kit.conf sets %s: the drop-in only grants reading the kit's files", k)
		}
	}
	for _, unit := range []string{"lifeboat.service", "lifeboat-once.service"} {
		if got := unitFile(t, filepath.Join("systemd", unit))["CapabilityBoundingSet"]; !slices.Equal(got, []string{""}) {
			t.Errorf("%s: CapabilityBoundingSet=%q, want none without the drop-in", unit, got)
		}
	}
}

// binDir holds the lifeboat binary built for these tests (when
// LIFEBOAT_BIN does not name one).
var (
	binDir   string
	binOnce  sync.Once
	binPath  string
	binError error
)

// lifeboatBinary returns LIFEBOAT_BIN (make test builds it) or builds
// ./cmd/lifeboat once.
func lifeboatBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("LIFEBOAT_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("LIFEBOAT_BIN: %v", err)
		}
		return p
	}
	binOnce.Do(func() {
		binDir, binError = os.MkdirTemp("", "lifeboat-deploy-test-")
		if binError != nil {
			return
		}
		binPath = filepath.Join(binDir, "lifeboat")
		cmd := exec.Command("go", "build", "-o", binPath, "../cmd/lifeboat")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			binError = fmt.Errorf("go build ../cmd/lifeboat: %v\n%s", err, out)
		}
	})
	if binError != nil {
		t.Fatal(binError)
	}
	return binPath
}

// etcdTLSEnv points the etcd TLS keys at real files: config check opens
// them, and the examples name where they are mounted.
func etcdTLSEnv(t *testing.T) []string {
	t.Helper()
	ca, cert, key := etcdtest.OtherCA(t)
	return []string{"LIFEBOAT_ETCD_CACERT=" + ca, "LIFEBOAT_ETCD_CERT=" + cert, "LIFEBOAT_ETCD_KEY=" + key}
}

// cleanEnv is the environment without lifeboat's, etcdctl's and AWS'
// variables, so the developer's settings do not leak into a test.
func cleanEnv() []string {
	var env []string
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "LIFEBOAT_") || strings.HasPrefix(e, "ETCDCTL_") || strings.HasPrefix(e, "AWS_") {
			continue
		}
		env = append(env, e)
	}
	return env
}

// TestExampleConfigs: the shipped configurations are valid.
func TestExampleConfigs(t *testing.T) {
	if testing.Short() && os.Getenv("LIFEBOAT_BIN") == "" {
		t.Skip("-short: skips building lifeboat (set LIFEBOAT_BIN to use a built one)")
	}
	bin := lifeboatBinary(t)
	// An identity_file and the etcd TLS files must exist for config
	// check; the examples name where they are mounted, so point those
	// keys at real ones here.
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("kubernetes/examples/*/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"systemd/config.yaml", "systemd/fleet.yaml", "kubernetes/base/config.yaml"}, files...)
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.CommandContext(t.Context(), bin, "config", "check", "--config", f)
			cmd.Env = cleanEnv()
			if regexp.MustCompile(`(?m)^\s*identity_file:`).Match(data) {
				cmd.Env = append(cmd.Env, "LIFEBOAT_ENCRYPTION_IDENTITY_FILE="+idFile)
			}
			if regexp.MustCompile(`(?m)^\s*(cacert|cert|key):`).Match(data) {
				cmd.Env = append(cmd.Env, etcdTLSEnv(t)...)
			}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("lifeboat config check --config %s: %v\n%s", f, err, out)
			}
		})
	}
	if len(files) < 3 {
		t.Errorf("only %d example configurations", len(files))
	}
}
