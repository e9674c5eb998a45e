package deploy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/kit"
)

// helmBinary is HELM_BIN or .bin/helm (make tools installs it); under
// CI=true a missing one fails the test.
func helmBinary(t *testing.T) string {
	t.Helper()
	return etcdtest.NeedBinary(t, "HELM_BIN", "helm")
}

// helm runs the helm binary with a HOME of its own (no user config, cache
// or repositories) and returns its stdout, or an error with its stderr.
func helm(t *testing.T, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.CommandContext(t.Context(), helmBinary(t), args...)
	cmd.Env = append(cleanEnv(), "HOME="+home, "XDG_CACHE_HOME="+home+"/cache",
		"XDG_CONFIG_HOME="+home+"/config", "XDG_DATA_HOME="+home+"/data", "HELM_NO_PLUGINS=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), nil
}

// chartCase is one set of values the chart is rendered with.
type chartCase struct {
	name   string
	files  []string // values files, relative to the chart
	set    []string // --set
	mode   string
	kinds  []string // the kinds it must render, sorted
	podSec string   // the Pod Security level its pods need
	// etcdHostPath: the etcd client certificate is kubeadm's, by hostPath.
	etcdHostPath bool
	// kitHostPaths are the host paths the recovery kit reads
	// (config.kit.paths), each mounted read-only below /host.
	kitHostPaths []string
	// noObjects: kubernetesObjects.enabled=false (no CRDs, no RBAC for
	// them, no ServiceAccount token in the pods).
	noObjects bool
}

// objectKinds are what kubernetesObjects (on by default) adds to the
// templates: the ClusterRole for the EtcdRecoverability, the Role for the
// EtcdBackups and events, the Role for events in "default", and bindings
// (the CRDs are in crds/, which helm template leaves out).
var objectKinds = []string{"ClusterRole", "ClusterRoleBinding", "Role", "Role", "RoleBinding", "RoleBinding"}

// withObjects is kinds with objectKinds, sorted.
func withObjects(kinds ...string) []string {
	out := append(slices.Clone(kinds), objectKinds...)
	slices.Sort(out)
	return out
}

// testRecipient is an age recipient for the kit's cases (a kit needs one).
const testRecipient = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p"

var chartCases = []chartCase{
	{name: "cronjob", files: []string{"ci/cronjob-values.yaml"}, mode: "cronjob", podSec: "restricted",
		kinds: withObjects("ConfigMap", "ConfigMap", "CronJob", "CronJob", "PrometheusRule", "ServiceAccount")},
	{name: "deployment", files: []string{"ci/deployment-values.yaml"}, mode: "deployment", podSec: "restricted",
		kinds: withObjects("ConfigMap", "ConfigMap", "ConfigMap", "Deployment", "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Service", "ServiceAccount", "ServiceMonitor")},
	{name: "kubeadm", files: []string{"ci/kubeadm-values.yaml"}, mode: "cronjob", podSec: "privileged", etcdHostPath: true,
		kinds: withObjects("ConfigMap", "CronJob", "CronJob", "ServiceAccount")},
	{name: "kit-kubeadm", files: []string{"ci/kit-values.yaml"}, mode: "deployment", podSec: "privileged", etcdHostPath: true,
		kinds:        withObjects("ConfigMap", "Deployment", "Service", "ServiceAccount"),
		kitHostPaths: []string{kit.KubeadmPKI, kit.KubeadmAPIServer, "/etc/kubernetes/enc/encryption-config.yaml"}},
	{name: "kit-k3s", files: []string{"ci/cronjob-values.yaml"}, mode: "cronjob", podSec: "privileged",
		set:          []string{"config.kit.paths={k3s,/etc/rancher/k3s/config.yaml}", "config.encryption.recipients={" + testRecipient + "}"},
		kinds:        withObjects("ConfigMap", "ConfigMap", "CronJob", "CronJob", "PrometheusRule", "ServiceAccount"),
		kitHostPaths: []string{kit.K3sServer + "/token", kit.K3sServer + "/tls", kit.K3sServer + "/cred", "/etc/rancher/k3s/config.yaml"}},
	{name: "deployment-minimal", mode: "deployment", podSec: "restricted",
		set:   []string{"mode=deployment", "config.store.url=s3://etcd-bucket/p", "config.etcd.endpoints={http://etcd:2379}", "serviceAccount.create=false", "image.digest=sha256:" + strings.Repeat("ab", 32)},
		kinds: withObjects("ConfigMap", "Deployment", "Service")},
	{name: "cronjob-without-objects", files: []string{"ci/cronjob-values.yaml"}, mode: "cronjob", podSec: "restricted", noObjects: true,
		set:   []string{"kubernetesObjects.enabled=false"},
		kinds: []string{"ConfigMap", "ConfigMap", "CronJob", "CronJob", "PrometheusRule", "ServiceAccount"}},
	{name: "fleet", files: []string{"ci/fleet-values.yaml"}, mode: "fleet", podSec: "restricted", noObjects: true,
		kinds: []string{"ConfigMap", "ConfigMap", "Deployment", "PrometheusRule", "Service", "ServiceAccount", "ServiceMonitor"}},
	{name: "fleet-minimal", mode: "fleet", podSec: "restricted", noObjects: true,
		set:   []string{"mode=fleet", "config.store.url=s3://etcd-bucket/p", "fleet.identities.existingSecret=ids", "fleet.identities.key=one.txt"},
		kinds: []string{"ConfigMap", "Deployment", "Service", "ServiceAccount"}},
	{name: "cronjob-monitoring-without-api", files: []string{"ci/cronjob-values.yaml"}, mode: "cronjob", podSec: "restricted",
		// enabled without force and without the API: no PrometheusRule.
		set:   []string{"prometheusRule.force=false", "dashboard.enabled=false", "cronjob.backup.schedule=*/30 * * * *"},
		kinds: withObjects("ConfigMap", "CronJob", "CronJob", "ServiceAccount")},
}

func (c chartCase) args(cmd ...string) []string {
	args := slices.Clone(cmd)
	for _, f := range c.files {
		args = append(args, "-f", filepath.Join(chartDir, f))
	}
	for _, s := range c.set {
		args = append(args, "--set", s)
	}
	return args
}

// renderChart renders the chart with c's values as release "lb" in
// namespace ns and decodes every object.
func renderChart(t *testing.T, c chartCase, ns string) []map[string]any {
	t.Helper()
	out, err := helm(t, c.args("template", "lb", chartDir, "--namespace", ns)...)
	if err != nil {
		t.Fatal(err)
	}
	return decodeObjects(t, out)
}

func decodeObjects(t *testing.T, out string) []map[string]any {
	t.Helper()
	var objs []map[string]any
	dec := yaml.NewDecoder(strings.NewReader(out))
	for {
		var o map[string]any
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs
		}
		if err != nil {
			t.Fatalf("rendered chart: %v\n%s", err, out)
		}
		if o != nil {
			objs = append(objs, o)
		}
	}
}

// wantNamespace is the namespace of an object outside the release's:
// none for cluster-scoped kinds, "default" for the Role (and binding) of
// the events of the cluster-scoped EtcdRecoverability.
func wantNamespace(o map[string]any) any {
	switch objKind(o) {
	case "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding":
		return nil
	case "Role", "RoleBinding":
		if strings.HasSuffix(objName(o), "-events") {
			return "default"
		}
	}
	return "lifeboat"
}

func objKind(o map[string]any) string { s, _ := o["kind"].(string); return s }

func objName(o map[string]any) string {
	m, _ := o["metadata"].(map[string]any)
	s, _ := m["name"].(string)
	return s
}

// dig returns the value at path in nested maps (nil when absent).
func dig(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// podSpecs returns the pod templates of the workloads in objs by name.
func podSpecs(objs []map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, o := range objs {
		var spec any
		switch objKind(o) {
		case "CronJob":
			spec = dig(o, "spec", "jobTemplate", "spec", "template", "spec")
		case "Deployment":
			spec = dig(o, "spec", "template", "spec")
		default:
			continue
		}
		out[objName(o)], _ = spec.(map[string]any)
	}
	return out
}

func TestChartLint(t *testing.T) {
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			if out, err := helm(t, c.args("lint", "--strict", chartDir)...); err != nil {
				t.Errorf("%v\n%s", err, out)
			}
		})
	}
}

// TestChartRender renders the matrix of values and checks what each mode
// must hold: the kinds, the config file (accepted by `lifeboat config
// check`, no secret in it), the rules and the dashboard as the files
// themselves, the credentials' mounts and the pods' security.
func TestChartRender(t *testing.T) {
	bin := lifeboatBinary(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	idFile := filepath.Join(t.TempDir(), "identity.txt")
	if err := os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The rules and the dashboard of each mode: the agent's, or the fleet's.
	alerts, dashboards := map[bool]any{}, map[bool]any{}
	for fleet, files := range map[bool][2]string{false: {"prometheus/alerts.yaml", "grafana/lifeboat.json"}, true: {"prometheus/fleet/alerts.yaml", "grafana/lifeboat-fleet.json"}} {
		var rules, dashboard any
		decodeYAML(t, files[0], &rules)
		dash, err := os.ReadFile(files[1])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(dash, &dashboard); err != nil {
			t.Fatal(err)
		}
		alerts[fleet], dashboards[fleet] = rules, dashboard
	}
	for _, c := range chartCases {
		t.Run(c.name, func(t *testing.T) {
			begin := time.Now()
			objs := renderChart(t, c, "lifeboat")
			t.Logf("rendered %d objects in %v", len(objs), time.Since(begin).Round(time.Millisecond))
			var kinds []string
			for _, o := range objs {
				kinds = append(kinds, objKind(o))
				if ns := dig(o, "metadata", "namespace"); ns != "lifeboat" && ns != wantNamespace(o) {
					t.Errorf("%s %s: namespace %v, want the release's", objKind(o), objName(o), ns)
				}
			}
			slices.Sort(kinds)
			if !slices.Equal(kinds, c.kinds) {
				t.Errorf("kinds %v, want %v", kinds, c.kinds)
			}
			for _, o := range objs {
				switch {
				case objKind(o) == "ConfigMap" && objName(o) == "lb-lifeboat":
					checkChartConfig(t, bin, idFile, c, dig(o, "data", "config.yaml"), podEnv(t, podSpecs(objs)))
				case objKind(o) == "PrometheusRule":
					if diff := cmp.Diff(alerts[c.mode == "fleet"], dig(o, "spec")); diff != "" {
						t.Errorf("PrometheusRule differs from the mode's alerts.yaml (-alerts +rule):\n%s", diff)
					}
				case objKind(o) == "ConfigMap" && objName(o) == "lb-lifeboat-dashboard":
					file := map[bool]string{false: "lifeboat.json", true: "lifeboat-fleet.json"}[c.mode == "fleet"]
					var got any
					if err := json.Unmarshal([]byte(fmt.Sprint(dig(o, "data", file))), &got); err != nil {
						t.Fatalf("dashboard ConfigMap: %s: %v", file, err)
					}
					if diff := cmp.Diff(dashboards[c.mode == "fleet"], got); diff != "" {
						t.Errorf("dashboard differs from grafana/%s:\n%s", file, diff)
					}
					if dig(o, "metadata", "labels", "grafana_dashboard") != "1" {
						t.Error("dashboard ConfigMap has no sidecar label grafana_dashboard: \"1\"")
					}
				case objKind(o) == "ServiceMonitor":
					checkServiceMonitor(t, c, o)
				}
			}
			pods := podSpecs(objs)
			if want := map[string]int{"cronjob": 2, "deployment": 1, "fleet": 1}[c.mode]; len(pods) != want {
				t.Errorf("%d workloads, want %d", len(pods), want)
			}
			for name, ps := range pods {
				checkChartPod(t, name, c, ps)
			}
		})
	}
}

// checkChartConfig: the rendered config.yaml passes `lifeboat config
// check` and holds no secret.
func checkChartConfig(t *testing.T, bin, idFile string, c chartCase, data any, env []string) {
	t.Helper()
	s, ok := data.(string)
	if !ok || s == "" {
		t.Fatal("ConfigMap has no config.yaml")
	}
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(s), &cfg); err != nil {
		t.Fatalf("config.yaml: %v", err)
	}
	for _, p := range [][]string{{"etcd", "password"}, {"notify", "webhooks"}} {
		if v := dig(cfg, p...); v != nil {
			t.Errorf("config.yaml holds the secret %s: %v", strings.Join(p, "."), v)
		}
	}
	if got, want := dig(cfg, "capture", "enabled") == true, c.mode == "deployment" && c.name == "deployment"; got != want {
		t.Errorf("capture.enabled %v, want %v", got, want)
	}
	if root, want := dig(cfg, "kit", "root"), len(c.kitHostPaths) > 0; want != (root == "/host") || !want && root != nil {
		t.Errorf("kit.root %v, want /host exactly when the kit has paths (%v)", root, c.kitHostPaths)
	}
	f := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(f, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), bin, "config", "check", "--config", f)
	cmd.Env = append(cleanEnv(), env...)
	if dig(cfg, "encryption", "identity_file") != nil {
		cmd.Env = append(cmd.Env, "LIFEBOAT_ENCRYPTION_IDENTITY_FILE="+idFile)
	}
	if dig(cfg, "etcd", "cacert") != nil || dig(cfg, "etcd", "cert") != nil {
		cmd.Env = append(cmd.Env, etcdTLSEnv(t)...)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("lifeboat config check: %v\n%s\nconfig.yaml:\n%s", err, out, s)
	}
}

// podEnv is the LIFEBOAT_* environment the chart's first workload gives
// lifeboat, as the kubelet would expand it (status.hostIP is 192.0.2.10).
func podEnv(t *testing.T, pods map[string]map[string]any) []string {
	t.Helper()
	names := slices.Sorted(maps.Keys(pods))
	if len(names) == 0 {
		return nil
	}
	vars := map[string]string{}
	var env []string
	ctrs, _ := dig(pods[names[0]], "containers").([]any)
	if len(ctrs) == 0 {
		t.Fatalf("%s: no containers", names[0])
	}
	envs, _ := dig(ctrs[0], "env").([]any)
	for _, e := range envs {
		name := fmt.Sprint(dig(e, "name"))
		val, ok := dig(e, "value").(string)
		if dig(e, "valueFrom", "fieldRef", "fieldPath") == "status.hostIP" {
			val, ok = "192.0.2.10", true
		}
		if !ok {
			continue
		}
		for k, v := range vars {
			val = strings.ReplaceAll(val, "$("+k+")", v)
		}
		vars[name] = val
		if strings.HasPrefix(name, "LIFEBOAT_") {
			env = append(env, name+"="+val)
		}
	}
	return env
}

// checkChartPod: the pod mounts what its config names, and is locked
// down (restricted Pod Security unless it reads kubeadm's PKI).
func checkChartPod(t *testing.T, name string, c chartCase, ps map[string]any) {
	t.Helper()
	// The token only with kubernetesObjects: the EtcdBackup objects.
	if ps["automountServiceAccountToken"] != !c.noObjects {
		t.Errorf("%s: automountServiceAccountToken is %v, want %v (kubernetesObjects.enabled)", name, ps["automountServiceAccountToken"], !c.noObjects)
	}
	ctrs, _ := ps["containers"].([]any)
	if len(ctrs) != 1 {
		t.Fatalf("%s: %d containers", name, len(ctrs))
	}
	ctr := ctrs[0].(map[string]any)
	if strings.HasSuffix(name, "-backup") {
		// The scrub runs with the daily drill job, never with every backup.
		if args, _ := ctr["args"].([]any); !slices.Contains(args, any("--scrub-schedule=")) {
			t.Errorf("%s: args %v do not turn the scrub off (--scrub-schedule=)", name, args)
		}
	}
	sc := ctr["securityContext"]
	if dig(sc, "readOnlyRootFilesystem") != true || dig(sc, "allowPrivilegeEscalation") != false {
		t.Errorf("%s: container securityContext %v", name, sc)
	}
	if drop, _ := dig(sc, "capabilities", "drop").([]any); !slices.Contains(drop, any("ALL")) {
		t.Errorf("%s: capabilities not dropped: %v", name, sc)
	}
	psc := ps["securityContext"]
	switch c.podSec {
	case "restricted":
		if dig(psc, "runAsNonRoot") != true || dig(psc, "runAsUser") != 65532 || dig(psc, "seccompProfile", "type") != "RuntimeDefault" {
			t.Errorf("%s: pod securityContext %v, want non-root 65532 with RuntimeDefault seccomp", name, psc)
		}
	case "privileged":
		// kubeadm's keys are 0600 root.
		if dig(psc, "runAsUser") != 0 {
			t.Errorf("%s: pod securityContext %v, want root to read kubeadm's PKI", name, psc)
		}
		if hostPath := hostPaths(ps)["etcd-client"]; c.etcdHostPath != (hostPath == "/etc/kubernetes/pki/etcd") {
			t.Errorf("%s: etcd-client volume hostPath %q, want kubeadm's: %v", name, hostPath, c.etcdHostPath)
		}
		if dig(ps, "nodeSelector", "node-role.kubernetes.io/control-plane") != "" {
			t.Errorf("%s: not on control-plane nodes: nodeSelector %v", name, ps["nodeSelector"])
		}
	}
	mounts := map[string]bool{}
	for _, m := range ctr["volumeMounts"].([]any) {
		mounts[fmt.Sprint(dig(m, "mountPath"))] = true
		if p := fmt.Sprint(dig(m, "mountPath")); strings.HasPrefix(p, "/etc/lifeboat/") && dig(m, "readOnly") != true {
			t.Errorf("%s: %s is not mounted read-only", name, p)
		}
	}
	want := []string{"/etc/lifeboat/config", "/var/lib/lifeboat/spool", "/var/lib/lifeboat/scratch", "/tmp"}
	if c.mode == "fleet" {
		// The hub takes no snapshot; it keeps its cache, drills in scratch.
		want = []string{"/etc/lifeboat/config", "/var/lib/lifeboat/fleet-cache", "/var/lib/lifeboat/scratch", "/tmp"}
		if mounts["/var/lib/lifeboat/spool"] {
			t.Errorf("%s: the hub mounts a spool", name)
		}
		checkFleetPod(t, name, ctr, ps)
	}
	for _, p := range want {
		if !mounts[p] {
			t.Errorf("%s: nothing mounted at %s (mounts %v)", name, p, mounts)
		}
	}
	checkKitMounts(t, name, c, ctr, ps)
}

// hostPaths are the host paths of a pod's hostPath volumes, by volume.
func hostPaths(ps map[string]any) map[string]string {
	out := map[string]string{}
	for _, v := range ps["volumes"].([]any) {
		if p, ok := dig(v, "hostPath", "path").(string); ok {
			out[fmt.Sprint(dig(v, "name"))] = p
		}
	}
	return out
}

// checkKitMounts: each host path of the kit is a hostPath volume mounted
// read-only at the same path below /host (kit.root), and the pod mounts
// no other host path than those and kubeadm's etcd PKI.
func checkKitMounts(t *testing.T, name string, c chartCase, ctr, ps map[string]any) {
	t.Helper()
	hp := hostPaths(ps)
	delete(hp, "etcd-client")
	var got []string
	for _, m := range ctr["volumeMounts"].([]any) {
		host, ok := hp[fmt.Sprint(dig(m, "name"))]
		if !ok {
			continue
		}
		got = append(got, host)
		if at := dig(m, "mountPath"); at != "/host"+host || dig(m, "readOnly") != true {
			t.Errorf("%s: host path %s mounted at %v (read-only %v), want read-only at /host%s", name, host, at, dig(m, "readOnly"), host)
		}
	}
	if len(got) != len(hp) {
		t.Errorf("%s: hostPath volumes %v, mounted %v", name, hp, got)
	}
	if !slices.Equal(got, c.kitHostPaths) {
		t.Errorf("%s: kit host paths %v, want %v", name, got, c.kitHostPaths)
	}
}

// TestChartSchemaRefuses: values.schema.json and the chart's checks refuse
// bad values at render time, naming the value.
func TestChartSchemaRefuses(t *testing.T) {
	base := []string{"template", "lb", chartDir, "-f", filepath.Join(chartDir, "ci/cronjob-values.yaml")}
	tests := []struct {
		name string
		set  []string
		want string // in the error
	}{
		{"unknown mode", []string{"mode=daemonset"}, "mode"},
		{"wrong type", []string{"service.port=http"}, "service/port"},
		{"bad cron schedule", []string{"cronjob.backup.schedule=every hour"}, "cronjob/backup/schedule"},
		{"bad agent schedule", []string{"config.schedule.drill=daily at 3"}, "config/schedule/drill"},
		{"unknown option", []string{"config.retention.keep_forever=true"}, "keep_forever"},
		{"misspelt section", []string{"config.retension.keep_last=3"}, "retension"},
		{"option of the wrong type", []string{"config.retention.keep_last=many"}, "config/retention/keep_last"},
		{"bad duration", []string{"config.drill.timeout=soon"}, "config/drill/timeout"},
		{"unknown top-level value", []string{"replicas=2"}, "replicas"},
		{"bad digest", []string{"image.digest=latest"}, "image/digest"},
		{"capture with cronjob", []string{"capture.enabled=true"}, "capture.enabled: continuous capture needs mode: deployment"},
		{"capture in config", []string{"mode=deployment", "config.capture.enabled=true"}, "config.capture.enabled"},
		{"etcd password in the ConfigMap", []string{"config.etcd.password=hunter2"}, "config.etcd.password"},
		{"webhook in the ConfigMap", []string{"config.notify.webhooks={https://hooks.example.com/T0/B0/XXXX}"}, "config.notify.webhooks"},
		{"no store", []string{"config.store.url="}, "config.store.url: required"},
		{"no endpoints", []string{"config.etcd.endpoints=null"}, "config.etcd.endpoints: required"},
		{"both etcd credentials", []string{"credentials.etcd.kubeadm.enabled=true"}, "not both"},
		{"kit root in config", []string{"config.kit.paths={kubeadm}", "config.kit.root=/", "config.encryption.recipients={" + testRecipient + "}"}, "config.kit.root: set by the chart"},
		{"relative kit encryption config", []string{"kit.encryptionConfig=enc.yaml"}, "kit/encryptionConfig"},
		{"kubernetes objects in config", []string{"config.kubernetes.objects.enabled=true"}, "config.kubernetes: set by the chart"},
		{"pdb with cronjob", []string{"podDisruptionBudget.enabled=true"}, "podDisruptionBudget.enabled: needs mode: deployment"},
		{"fleet with etcd credentials", []string{"mode=fleet"}, "credentials.etcd: mode fleet reaches no etcd"},
		{"fleet with the agent's identity", []string{"mode=fleet", "credentials.etcd.existingSecret=", "credentials.age.existingSecret=age"}, "fleet.identities.existingSecret"},
		{"fleet without stores", []string{"mode=fleet", "credentials.etcd.existingSecret=", "config.store.url="}, "config.store.url: required"},
		{"fleet cache in config", []string{"mode=fleet", "credentials.etcd.existingSecret=", "config.fleet.cache_dir=/x"}, "config.fleet.cache_dir: set by the chart"},
		{"fleet identities twice", []string{"mode=fleet", "credentials.etcd.existingSecret=", "fleet.identities.existingSecret=ids", "config.fleet.drills.identities=/x"}, "config.fleet.drills.identities: set by the chart"},
		{"fleet identities outside fleet", []string{"fleet.identities.existingSecret=ids"}, "fleet.identities.existingSecret: the fleet hub's"},
		{"fleet bad interval", []string{"mode=fleet", "fleet.interval=often"}, "fleet/interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := slices.Clone(base)
			for _, s := range tt.set {
				args = append(args, "--set", s)
			}
			out, err := helm(t, args...)
			if err == nil {
				t.Fatalf("rendered without error:\n%s", out)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error does not name %q: %v", tt.want, err)
			}
			// What helm printed, without the command line.
			_, said, _ := strings.Cut(err.Error(), ": exit status")
			for _, secret := range []string{"hunter2", "XXXX"} {
				if strings.Contains(said, secret) {
					t.Errorf("error shows the secret: %v", err)
				}
			}
		})
	}
}

// checkServiceMonitor: the agent's target is job lifeboat (jobLabel: the
// Service's app.kubernetes.io/name; LifeboatAgentDown selects
// up{job="lifeboat"}), the hub's job lifeboat-fleet, each selecting its
// own Service.
func checkServiceMonitor(t *testing.T, c chartCase, o map[string]any) {
	t.Helper()
	if dig(o, "spec", "jobLabel") != "app.kubernetes.io/name" {
		t.Error("ServiceMonitor: jobLabel is not app.kubernetes.io/name (LifeboatAgentDown selects up{job=\"lifeboat\"})")
	}
	component := map[bool]string{false: "agent", true: "fleet"}[c.mode == "fleet"]
	if got := dig(o, "spec", "selector", "matchLabels", "app.kubernetes.io/component"); got != component {
		t.Errorf("ServiceMonitor selects component %v, want %s", got, component)
	}
	ep, _ := dig(o, "spec", "endpoints").([]any)
	relabel, _ := dig(ep[0], "relabelings").([]any)
	fleetJob := len(relabel) == 1 && dig(relabel[0], "targetLabel") == "job" && dig(relabel[0], "replacement") == "lifeboat-fleet"
	if fleetJob != (c.mode == "fleet") {
		t.Errorf("ServiceMonitor relabelings %v: want job lifeboat-fleet exactly in mode fleet", relabel)
	}
}

// checkFleetPod: the hub runs fleet serve on the Service's port, mounts
// no etcd credential, and its identities (fleet.identities.existingSecret)
// read-only where config fleet.drills.identities points.
func checkFleetPod(t *testing.T, name string, ctr, ps map[string]any) {
	t.Helper()
	args := fmt.Sprint(ctr["args"])
	for _, want := range []string{"fleet serve", "--listen=0.0.0.0:", "--interval="} {
		if !strings.Contains(args, want) {
			t.Errorf("%s: args %s have no %q", name, args, want)
		}
	}
	for _, v := range ps["volumes"].([]any) {
		switch dig(v, "name") {
		case "etcd-client", "age", "spool":
			t.Errorf("%s: the hub has a volume %v", name, dig(v, "name"))
		case "fleet-identities":
			if dig(v, "secret", "secretName") == nil {
				t.Errorf("%s: fleet-identities is not a Secret: %v", name, v)
			}
		}
	}
}
