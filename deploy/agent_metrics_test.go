package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
)

// TestAgentExportsMetrics runs one real cycle of the built binary, the
// way a systemd timer does (lifeboat agent --once --textfile), against a
// real etcd with kubeadm-like TLS client certificates, and checks the
// metrics it writes against what the alert rules and the dashboard select:
// every metric they use exists, every label they match on or group by is
// one lifeboat sets, every fixed value they match (job_name="snapshot",
// state="broken", …) is one it exports, and lifeboatMetrics is the
// complete list.
func TestAgentExportsMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: skips a full backup and drill cycle of the built binary")
	}
	bin := lifeboatBinary(t)
	c := etcdtest.Start(t, etcdtest.Options{TLS: true})
	cli := c.Client(t)
	for _, k := range []string{"/registry/namespaces/default", "/registry/namespaces/kube-system", "/registry/services/specs/default/kubernetes"} {
		if _, err := cli.Put(t.Context(), k, "v"); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	// A kubeadm-like PKI for the recovery kit: its drill sets
	// lifeboat_kit_cert_expiry_timestamp_seconds.
	kitRoot := filepath.Join(dir, "host")
	kittest.Kubeadm(t, kitRoot, time.Now(), time.Now().Add(365*24*time.Hour))
	id, idFile := kittest.Identity(t, dir)
	textfile := filepath.Join(dir, "textfile", "lifeboat.prom")
	if err := os.MkdirAll(filepath.Dir(textfile), 0o700); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "agent", "--once",
		"--cluster", "deploytest",
		"--endpoints", strings.Join(c.Endpoints(), ","),
		"--cacert", c.CAFile, "--cert", c.CertFile, "--key", c.KeyFile,
		"--store", "file://"+filepath.Join(dir, "store"),
		"--copy", "file://"+filepath.Join(dir, "copy"),
		"--spool-dir", filepath.Join(dir, "spool"),
		"--scratch-dir", filepath.Join(dir, "scratch"),
		"--check-prefix", "/registry/namespaces/",
		"--prune-schedule", "@every 6h",
		"--scrub-schedule", "@daily",
		"--keep-last", "3",
		"--log-format", "json",
		"--textfile", textfile,
		"--kit-path", "kubeadm", "--kit-root", kitRoot,
		"--recipient", id.Recipient().String(), "--identity-file", idFile,
	)
	cmd.Env = cleanEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lifeboat agent --once: %v\n%s", err, out)
	}
	st, err := os.Stat(textfile)
	if err != nil {
		t.Fatalf("no textfile: %v\n%s", err, out)
	}
	if st.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("textfile mode %v: node_exporter (another user) cannot read it", st.Mode().Perm())
	}
	f, err := os.Open(textfile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := expfmt.NewTextParser(model.LegacyValidation)
	families, err := p.TextToMetricFamilies(f)
	if err != nil {
		t.Fatalf("parse textfile: %v", err)
	}

	// labels[metric][label] = exported values
	labels := map[string]map[string][]string{}
	var exported []string
	for name, mf := range families {
		if !strings.HasPrefix(name, "lifeboat_") {
			continue
		}
		exported = append(exported, name)
		ls := map[string][]string{}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(ls[lp.GetName()], lp.GetValue()) {
					ls[lp.GetName()] = append(ls[lp.GetName()], lp.GetValue())
				}
			}
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			ls["le"] = []string{"*"}
		}
		labels[name] = ls
	}
	sort.Strings(exported)
	want := slices.DeleteFunc(slices.Clone(lifeboatMetrics), func(n string) bool { return slices.Contains(afterCopyDrill, n) })
	sort.Strings(want)
	if !slices.Equal(exported, want) {
		t.Errorf("lifeboat agent --once exports\n  %v\nlifeboatMetrics lists\n  %v", exported, want)
	}

	allLabels := slices.Clone(targetLabels)
	for _, ls := range labels {
		for l := range ls {
			allLabels = append(allLabels, l)
		}
	}
	for _, q := range queries(t) {
		for _, sel := range selectors(q.expr) {
			if !strings.HasPrefix(sel.Metric, "lifeboat_") {
				continue
			}
			ls, ok := labels[baseMetric(sel.Metric)]
			if !ok {
				t.Errorf("%s: %s is not exported", q.where, sel.Metric)
				continue
			}
			for _, m := range sel.Matchers {
				// The scrape job (or the Pushgateway group) is "lifeboat";
				// lifeboat's own jobs are job_name.
				if m.Label == "job" && m.Value != "lifeboat" {
					t.Errorf("%s: %s{job%s%q}: lifeboat's metrics carry job=\"lifeboat\" at most; the job label is job_name", q.where, sel.Metric, m.Op, m.Value)
					continue
				}
				if slices.Contains(targetLabels, m.Label) {
					continue
				}
				values, ok := ls[m.Label]
				if !ok {
					t.Errorf("%s: %s has no label %q (it has %v)", q.where, sel.Metric, m.Label, keys(ls))
					continue
				}
				if !matchesAny(m, values) {
					t.Errorf("%s: %s{%s%s%q} matches none of the exported values %v", q.where, sel.Metric, m.Label, m.Op, m.Value, values)
				}
			}
		}
		for _, l := range groupingLabels(q.expr) {
			if !slices.Contains(allLabels, l) {
				t.Errorf("%s: groups by %q, which no lifeboat metric has", q.where, l)
			}
		}
	}
}

// matchesAny reports whether a positive matcher selects one of values
// (negative matchers always pass).
func matchesAny(m matcher, values []string) bool {
	switch m.Op {
	case "=":
		return slices.Contains(values, m.Value)
	case "=~":
		re, err := regexp.Compile("^(?:" + m.Value + ")$")
		if err != nil {
			return false
		}
		// Every alternative of a plain a|b list must exist.
		if regexp.MustCompile(`^[a-z_|]+$`).MatchString(m.Value) {
			for alt := range strings.SplitSeq(m.Value, "|") {
				if !slices.Contains(values, alt) {
					return false
				}
			}
			return true
		}
		return slices.ContainsFunc(values, re.MatchString)
	}
	return true
}

func keys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
