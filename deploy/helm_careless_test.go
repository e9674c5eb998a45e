package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// helmNotes is what helm install prints after NOTES: for the values.
func helmNotes(t *testing.T, set ...string) string {
	t.Helper()
	args := []string{"install", "lb", chartDir, "--dry-run=client", "-f", filepath.Join(chartDir, "ci/cronjob-values.yaml")}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	_, notes, ok := strings.Cut(out, "NOTES:")
	if !ok {
		t.Fatalf("no NOTES in\n%s", out)
	}
	return notes
}

// TestChartSchedulesOnePlace (issue 29 §3): a schedule has one place per
// mode: cronjob.backup.schedule and cronjob.drill.schedule in cronjob
// mode, config.schedule in deployment mode. config.schedule in cronjob
// mode, which the CronJobs never read, is refused and names the values
// to set; the Deployment still gets the chart's schedules by default.
func TestChartSchedulesOnePlace(t *testing.T) {
	base := []string{"template", "lb", chartDir, "-f", filepath.Join(chartDir, "ci/cronjob-values.yaml")}
	out, err := helm(t, append(base, "--set", "config.schedule.snapshot=@every 30m")...)
	if err == nil || !strings.Contains(err.Error(), "cronjob.backup.schedule") || !strings.Contains(err.Error(), "config.schedule") {
		t.Errorf("config.schedule in cronjob mode: %v, want an error naming cronjob.backup.schedule\n%s", err, out)
	}
	out, err = helm(t, base...)
	if err != nil {
		t.Fatal(err)
	}
	if cm := configMapConfig(t, decodeObjects(t, out)); strings.Contains(cm, "schedule:") {
		t.Errorf("cronjob mode's config.yaml holds schedules the CronJobs never read:\n%s", cm)
	}
	dep := []string{"template", "lb", chartDir, "-f", filepath.Join(chartDir, "ci/deployment-values.yaml")}
	out, err = helm(t, dep...)
	if err != nil {
		t.Fatal(err)
	}
	cm := configMapConfig(t, decodeObjects(t, out))
	for _, want := range []string{"snapshot: '@every 1h'", "prune: '@every 6h'", "drill: CRON_TZ=UTC 30 3 * * *"} {
		if !strings.Contains(cm, want) {
			t.Errorf("deployment mode's config.yaml lacks the default schedule %q:\n%s", want, cm)
		}
	}
	out, err = helm(t, append(dep, "--set", "config.schedule.snapshot=@every 15m")...)
	if err != nil {
		t.Fatal(err)
	}
	if cm := configMapConfig(t, decodeObjects(t, out)); !strings.Contains(cm, "snapshot: '@every 15m'") || !strings.Contains(cm, "prune: '@every 6h'") {
		t.Errorf("deployment mode with config.schedule.snapshot set:\n%s", cm)
	}
}

// configMapConfig is the config.yaml of the rendered lifeboat ConfigMap.
func configMapConfig(t *testing.T, objs []map[string]any) string {
	t.Helper()
	for _, o := range objs {
		if objKind(o) == "ConfigMap" {
			if s, ok := dig(o, "data", "config.yaml").(string); ok {
				return s
			}
		}
	}
	t.Fatal("no ConfigMap with config.yaml")
	return ""
}

// TestChartNotesWarnWithoutPushgateway (issue 29 §3): in cronjob mode
// without a Pushgateway the Jobs' metrics go nowhere and no alert can
// fire: the install notes say so.
func TestChartNotesWarnWithoutPushgateway(t *testing.T) {
	const warning = "metrics go nowhere"
	if notes := helmNotes(t, "config.agent.pushgateway="); !strings.Contains(notes, warning) || !strings.Contains(notes, "config.agent.pushgateway") {
		t.Errorf("cronjob mode without a Pushgateway: the notes do not warn:\n%s", notes)
	}
	if notes := helmNotes(t); strings.Contains(notes, warning) {
		t.Errorf("cronjob mode with a Pushgateway: the notes warn:\n%s", notes)
	}
}

// TestReadmeEtcdSecretKubeadmFiles (issue 29 §3): the README's command
// that makes the etcd client Secret names kubeadm's real files, the ones
// the chart's kubeadm mode mounts (values.yaml credentials.etcd.kubeadm),
// so it works as pasted on a control-plane node.
func TestReadmeEtcdSecretKubeadmFiles(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Credentials struct {
			Etcd struct {
				Kubeadm struct{ Path, Cert, Key string }
			}
		}
	}
	if err := yaml.Unmarshal(values, &v); err != nil {
		t.Fatal(err)
	}
	k := v.Credentials.Etcd.Kubeadm
	want := []string{"ca.crt=" + k.Path + "/ca.crt", "tls.crt=" + k.Path + "/" + k.Cert, "tls.key=" + k.Path + "/" + k.Key}
	var line string
	for l := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(l, "create secret") && strings.Contains(l, "etcd") {
			line = l
		}
	}
	if line == "" {
		t.Fatal("README: no kubectl create secret command for etcd")
	}
	var got []string
	for _, m := range regexp.MustCompile(`--from-file=(\S+)`).FindAllStringSubmatch(line, -1) {
		got = append(got, m[1])
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("README's secret command lacks --from-file=%s (kubeadm's file): %s", w, line)
		}
	}
}
