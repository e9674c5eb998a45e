package validate

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// Paths relative to this package's directory.
const (
	kubeDir    = ".."               // deploy/kubernetes
	promDir    = "../../prometheus" // deploy/prometheus
	secretsDir = "../secrets"       // Secret templates
	namespace  = "lifeboat"         // where every overlay deploys
	metricPort = "http-metrics"     // the agent's named port
	configKey  = "config.yaml"      // the ConfigMap key lifeboat reads
	configFlag = "--config="        // how the pods name it
	configMap  = "lifeboat-config"  // generator name (gets a hash suffix)
	etcdSecret = "lifeboat-etcd-client"
)

// overlays are the kustomizations users deploy, by kind; base and the
// rules are rendered too, but only these must be complete deployments.
var overlays = map[string]string{
	"overlays/cronjob":    "cronjob",
	"overlays/deployment": "deployment",
	"examples/kubeadm":    "cronjob",
}

var decoder = func() runtime.Decoder {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(appsv1.AddToScheme(s))
	utilruntime.Must(batchv1.AddToScheme(s))
	// Strict: unknown and duplicate fields are errors, not dropped.
	return serializer.NewCodecFactory(s, serializer.EnableStrict).UniversalDeserializer()
}()

// The Prometheus Operator's CRDs have no types in k8s.io/api. These structs
// hold the subset of monitoring.coreos.com/v1 that lifeboat's manifests
// use; decoding is strict, so a misspelt (or a not yet listed) field fails.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel          string               `json:"jobLabel,omitempty"`
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector *struct {
			Any        bool     `json:"any,omitempty"`
			MatchNames []string `json:"matchNames,omitempty"`
		} `json:"namespaceSelector,omitempty"`
		Endpoints []struct {
			Port          string `json:"port,omitempty"`
			Path          string `json:"path,omitempty"`
			Scheme        string `json:"scheme,omitempty"`
			Interval      string `json:"interval,omitempty"`
			ScrapeTimeout string `json:"scrapeTimeout,omitempty"`
			HonorLabels   bool   `json:"honorLabels,omitempty"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name     string `json:"name"`
			Interval string `json:"interval,omitempty"`
			Rules    []struct {
				Alert       string            `json:"alert,omitempty"`
				Record      string            `json:"record,omitempty"`
				Expr        string            `json:"expr"`
				For         string            `json:"for,omitempty"`
				Labels      map[string]string `json:"labels,omitempty"`
				Annotations map[string]string `json:"annotations,omitempty"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// decode strictly decodes one YAML document into its typed object.
func decode(doc []byte) (runtime.Object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("read apiVersion and kind: %w", err)
	}
	if tm.APIVersion == "" || tm.Kind == "" {
		return nil, errors.New("apiVersion or kind missing")
	}
	var obj runtime.Object
	switch tm.GroupVersionKind() {
	case monitoringV1.WithKind("ServiceMonitor"):
		obj = &serviceMonitor{}
	case monitoringV1.WithKind("PrometheusRule"):
		obj = &prometheusRule{}
	default:
		o, _, err := decoder.Decode(doc, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("decode %s %s: %w", tm.APIVersion, tm.Kind, err)
		}
		return o, nil
	}
	// As the API server decodes: field names match case-sensitively,
	// unknown and duplicate fields are errors.
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	strict, err := kjson.UnmarshalStrict(js, obj)
	if err == nil {
		err = errors.Join(strict...)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", tm.APIVersion, tm.Kind, err)
	}
	return obj, nil
}

func (s *serviceMonitor) DeepCopyObject() runtime.Object { c := *s; return &c }
func (p *prometheusRule) DeepCopyObject() runtime.Object { c := *p; return &c }

var monitoringV1 = schema.GroupVersion{Group: "monitoring.coreos.com", Version: "v1"}

// splitDocs splits a multi-document YAML stream, dropping empty documents.
func splitDocs(t *testing.T, data []byte) [][]byte {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("split YAML documents: %v", err)
		}
		if len(bytes.TrimSpace(stripComments(doc))) > 0 {
			docs = append(docs, doc)
		}
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for line := range bytes.Lines(doc) {
		if !bytes.HasPrefix(bytes.TrimSpace(line), []byte("#")) {
			out = append(out, line...)
		}
	}
	return out
}

// manifestFiles lists every Kubernetes manifest: each YAML file under
// deploy/kubernetes and the PrometheusRule, except kustomizations and the
// generator input config.yaml.
func manifestFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, root := range []string{kubeDir, promDir} {
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "validate" {
					return filepath.SkipDir
				}
				return nil
			}
			name := d.Name()
			if !strings.HasSuffix(name, ".yaml") || name == "kustomization.yaml" || name == configKey {
				return nil
			}
			// Prometheus' own rule files are checked by promtool.
			if root == promDir && name != "prometheusrule.yaml" {
				return nil
			}
			files = append(files, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(files) < 10 {
		t.Fatalf("found only %d manifests: %v", len(files), files)
	}
	return files
}

func TestManifestsDecodeStrictly(t *testing.T) {
	for _, f := range manifestFiles(t) {
		t.Run(strings.TrimPrefix(filepath.ToSlash(f), "../"), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			docs := splitDocs(t, data)
			if len(docs) == 0 {
				t.Fatal("no YAML document")
			}
			for i, doc := range docs {
				if _, err := decode(doc); err != nil {
					t.Errorf("document %d: %v", i, err)
				}
			}
		})
	}
}

// TestDecodeIsStrict proves the decoder rejects what the API server (or
// the operator) would drop or refuse, so the test above can fail.
func TestDecodeIsStrict(t *testing.T) {
	tests := []struct {
		name string
		doc  string
	}{
		{"unknown field in a CronJob", `
apiVersion: batch/v1
kind: CronJob
metadata: {name: x}
spec:
  schedule: "* * * * *"
  concurencyPolicy: Forbid
  jobTemplate: {spec: {template: {spec: {containers: [{name: a, image: b}]}}}}
`},
		{"unknown field in a container", `
apiVersion: apps/v1
kind: Deployment
metadata: {name: x}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers: [{name: a, image: b, readOnlyRootFilesystem: true}]
`},
		{"duplicate field", `
apiVersion: v1
kind: ServiceAccount
metadata: {name: x}
automountServiceAccountToken: false
automountServiceAccountToken: true
`},
		{"wrong type", `
apiVersion: v1
kind: Service
metadata: {name: x}
spec: {ports: [{port: "nine"}]}
`},
		{"unknown kind", `
apiVersion: v1
kind: Podd
metadata: {name: x}
`},
		{"unknown field in a ServiceMonitor", `
apiVersion: monitoring.coreos.com/v1
kind: ServiceMonitor
metadata: {name: x}
spec:
  selector: {}
  endpoints: [{port: http, honorlabels: true}]
`},
		{"unknown field in a PrometheusRule", `
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata: {name: x}
spec:
  groups: [{name: g, rules: [{alert: A, expr: up, severity: critical}]}]
`},
		{"no kind", `
apiVersion: v1
metadata: {name: x}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := decode([]byte(tt.doc)); err == nil {
				t.Error("decoded without error")
			}
		})
	}
}

// render runs kustomize on dir (relative to deploy/kubernetes) and decodes
// every resource strictly.
func render(t *testing.T, dir string) []runtime.Object {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), filepath.Join(kubeDir, dir))
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	out, err := m.AsYaml()
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var objs []runtime.Object
	for i, doc := range splitDocs(t, out) {
		o, err := decode(doc)
		if err != nil {
			t.Errorf("%s: rendered resource %d: %v\n%s", dir, i, err, doc)
			continue
		}
		objs = append(objs, o)
	}
	return objs
}

// kustomizationDirs lists every directory with a kustomization.yaml,
// relative to deploy/kubernetes, and the rules' ../prometheus.
func kustomizationDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(kubeDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() == "kustomization.yaml" {
			rel, err := filepath.Rel(kubeDir, filepath.Dir(p))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return append(dirs, "../prometheus")
}

func TestKustomizationsRender(t *testing.T) {
	dirs := kustomizationDirs(t)
	for _, want := range append([]string{"base"}, slices.Collect(maps.Keys(overlays))...) {
		if !slices.Contains(dirs, want) {
			t.Errorf("no kustomization in %s", want)
		}
	}
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			objs := render(t, dir)
			if len(objs) == 0 {
				t.Fatal("renders nothing")
			}
			if dir == "../prometheus" {
				return // namespaced by the overlays that include it
			}
			for _, o := range objs {
				m := meta(o)
				if _, ok := o.(*corev1.Namespace); ok {
					continue
				}
				if m.Namespace != namespace {
					t.Errorf("%s %s: namespace %q, want %q", kind(o), m.Name, m.Namespace, namespace)
				}
			}
		})
	}
}

// TestEveryManifestIsUsed: each manifest is a resource of some
// kustomization, or a Secret template under secrets/.
func TestEveryManifestIsUsed(t *testing.T) {
	used := map[string]bool{}
	for _, dir := range kustomizationDirs(t) {
		var k struct {
			Resources []string `json:"resources"`
		}
		data, err := os.ReadFile(filepath.Join(kubeDir, dir, "kustomization.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(data, &k); err != nil {
			t.Fatalf("%s/kustomization.yaml: %v", dir, err)
		}
		for _, r := range k.Resources {
			used[filepath.Clean(filepath.Join(kubeDir, dir, r))] = true
		}
	}
	for _, f := range manifestFiles(t) {
		if filepath.Dir(f) == filepath.Clean(secretsDir) {
			continue
		}
		if !used[filepath.Clean(f)] {
			t.Errorf("%s is in no kustomization's resources", f)
		}
	}
}

// secretTemplates returns the Secrets under secrets/ by name.
func secretTemplates(t *testing.T) map[string]*corev1.Secret {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(secretsDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*corev1.Secret{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range splitDocs(t, data) {
			o, err := decode(doc)
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			s, ok := o.(*corev1.Secret)
			if !ok {
				t.Fatalf("%s: %s, want only Secrets", f, kind(o))
			}
			if s.Namespace != namespace {
				t.Errorf("%s: namespace %q, want %q", f, s.Namespace, namespace)
			}
			out[s.Name] = s
		}
	}
	for _, want := range []string{etcdSecret, "lifeboat-s3", "lifeboat-age"} {
		if out[want] == nil {
			t.Errorf("no Secret template %s", want)
		}
	}
	return out
}

func secretKeys(s *corev1.Secret) []string {
	var keys []string
	for k := range s.StringData {
		keys = append(keys, k)
	}
	for k := range s.Data {
		keys = append(keys, k)
	}
	return keys
}

// TestOverlays checks what strict decoding cannot: that the pieces fit
// together and keep lifeboat's promises (non-root, read-only root,
// bounded disks, CronJobs that never overlap) and that config.yaml's paths
// are where the pods mount them.
func TestOverlays(t *testing.T) {
	secrets := secretTemplates(t)
	for overlay, mode := range overlays {
		t.Run(overlay, func(t *testing.T) {
			objs := render(t, overlay)
			byKind := map[string][]runtime.Object{}
			for _, o := range objs {
				byKind[kind(o)] = append(byKind[kind(o)], o)
			}
			for _, k := range []string{"Namespace", "ServiceAccount", "ConfigMap", "PrometheusRule"} {
				if len(byKind[k]) != 1 {
					t.Errorf("%d %s, want 1", len(byKind[k]), k)
				}
			}
			if ns, ok := first[*corev1.Namespace](objs); ok {
				if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
					t.Errorf("namespace enforces pod security %q, want restricted", got)
				}
			}
			cm, _ := first[*corev1.ConfigMap](objs)
			if cm == nil || !strings.HasPrefix(cm.Name, configMap+"-") {
				t.Fatalf("no hashed %s ConfigMap", configMap)
			}
			var cfg struct {
				Etcd struct {
					CACert string `json:"cacert"`
					Cert   string `json:"cert"`
					Key    string `json:"key"`
				} `json:"etcd"`
				Snapshot struct {
					SpoolDir string `json:"spool_dir"`
				} `json:"snapshot"`
				Drill struct {
					ScratchDir string `json:"scratch_dir"`
				} `json:"drill"`
				Agent struct {
					Pushgateway string `json:"pushgateway"`
				} `json:"agent"`
				Encryption struct {
					IdentityFile string `json:"identity_file"`
				} `json:"encryption"`
			}
			if err := yaml.Unmarshal([]byte(cm.Data[configKey]), &cfg); err != nil {
				t.Fatalf("ConfigMap %s: %v", configKey, err)
			}
			p := pod{t: t, cm: cm, secrets: secrets,
				paths: map[string]string{
					"snapshot.spool_dir": cfg.Snapshot.SpoolDir, "drill.scratch_dir": cfg.Drill.ScratchDir,
					"etcd.cacert": cfg.Etcd.CACert, "etcd.cert": cfg.Etcd.Cert, "etcd.key": cfg.Etcd.Key,
					"agent.pushgateway":        cfg.Agent.Pushgateway,
					"encryption.identity_file": cfg.Encryption.IdentityFile,
				}}

			switch mode {
			case "cronjob":
				cjs := byKind["CronJob"]
				if len(cjs) != 2 {
					t.Fatalf("%d CronJobs, want backup and drill", len(cjs))
				}
				for _, o := range cjs {
					checkCronJob(t, o.(*batchv1.CronJob), p)
				}
			case "deployment":
				checkDeployment(t, objs, p)
			}
		})
	}
}

func checkCronJob(t *testing.T, cj *batchv1.CronJob, p pod) {
	t.Helper()
	name := "CronJob " + cj.Name
	s := cj.Spec
	if s.ConcurrencyPolicy != batchv1.ForbidConcurrent {
		t.Errorf("%s: concurrencyPolicy %q, want Forbid", name, s.ConcurrencyPolicy)
	}
	if s.StartingDeadlineSeconds == nil || *s.StartingDeadlineSeconds <= 0 {
		t.Errorf("%s: no startingDeadlineSeconds", name)
	}
	if s.TimeZone == nil {
		t.Errorf("%s: no timeZone (the controller's local time would apply)", name)
	}
	js := s.JobTemplate.Spec
	if js.BackoffLimit == nil {
		t.Errorf("%s: no backoffLimit", name)
	}
	if js.ActiveDeadlineSeconds == nil || *js.ActiveDeadlineSeconds <= 0 {
		t.Errorf("%s: no activeDeadlineSeconds", name)
	}
	if rp := js.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever {
		t.Errorf("%s: restartPolicy %q, want Never (exit codes must reach the Job)", name, rp)
	}
	c := p.check(name, &js.Template.Spec)
	if c == nil {
		return
	}
	if !slices.Contains(c.Args, "--once") || c.Args[0] != "agent" {
		t.Errorf("%s: args %q, want agent --once", name, c.Args)
	}
	if p.paths["agent.pushgateway"] == "" && !hasEnv(c, "LIFEBOAT_AGENT_PUSHGATEWAY") {
		t.Errorf("%s: no agent.pushgateway in config.yaml nor LIFEBOAT_AGENT_PUSHGATEWAY: its metrics would be lost", name)
	}
	p.needPath(name, c, "snapshot.spool_dir", "drill.scratch_dir")
}

func checkDeployment(t *testing.T, objs []runtime.Object, p pod) {
	t.Helper()
	d, ok := first[*appsv1.Deployment](objs)
	if !ok {
		t.Fatal("no Deployment")
	}
	name := "Deployment " + d.Name
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 {
		t.Errorf("%s: want exactly one replica", name)
	}
	if d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("%s: strategy %q, want Recreate", name, d.Spec.Strategy.Type)
	}
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("%s: selector %v does not match its pod labels %v", name, d.Spec.Selector, d.Spec.Template.Labels)
	}
	c := p.check(name, &d.Spec.Template.Spec)
	if c == nil {
		return
	}
	if len(c.Args) == 0 || c.Args[0] != "agent" || slices.Contains(c.Args, "--once") {
		t.Errorf("%s: args %q, want the agent daemon", name, c.Args)
	}
	p.needPath(name, c, "snapshot.spool_dir", "drill.scratch_dir")
	if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == metricPort }) {
		t.Errorf("%s: no container port %s", name, metricPort)
	}
	for probe, pr := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if pr == nil || pr.HTTPGet == nil || pr.HTTPGet.Port.String() != metricPort {
			t.Errorf("%s: no HTTP %s probe on %s", name, probe, metricPort)
		}
	}

	svc, ok := first[*corev1.Service](objs)
	if !ok {
		t.Fatal("no Service")
	}
	if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels)) || len(svc.Spec.Selector) == 0 {
		t.Errorf("Service %s: selector %v does not select the agent's pods %v", svc.Name, svc.Spec.Selector, d.Spec.Template.Labels)
	}
	if !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("Service %s: not-ready agents (store down) would not be scraped", svc.Name)
	}
	var portNames []string
	for _, sp := range svc.Spec.Ports {
		portNames = append(portNames, sp.Name)
		if sp.TargetPort.String() != metricPort {
			t.Errorf("Service %s: port %s targets %s, want %s", svc.Name, sp.Name, sp.TargetPort.String(), metricPort)
		}
	}

	sm, ok := first[*serviceMonitor](objs)
	if !ok {
		t.Fatal("no ServiceMonitor")
	}
	smSel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
	if err != nil || smSel.Empty() || !smSel.Matches(labels.Set(svc.Labels)) {
		t.Errorf("ServiceMonitor %s: selector %v does not select Service labels %v", sm.Name, sm.Spec.Selector, svc.Labels)
	}
	if len(sm.Spec.Endpoints) == 0 {
		t.Fatalf("ServiceMonitor %s: no endpoints", sm.Name)
	}
	for _, ep := range sm.Spec.Endpoints {
		if !slices.Contains(portNames, ep.Port) {
			t.Errorf("ServiceMonitor %s: port %q is not a Service port %v", sm.Name, ep.Port, portNames)
		}
		if ep.Path != "/metrics" {
			t.Errorf("ServiceMonitor %s: path %q, want /metrics", sm.Name, ep.Path)
		}
	}
}

// pod checks a pod spec against the security and wiring rules.
type pod struct {
	t       *testing.T
	cm      *corev1.ConfigMap
	secrets map[string]*corev1.Secret
	paths   map[string]string // config key -> path
}

// check returns the lifeboat container after checking the pod.
func (p pod) check(name string, ps *corev1.PodSpec) *corev1.Container {
	t := p.t
	t.Helper()
	if ps.ServiceAccountName != "lifeboat" {
		t.Errorf("%s: serviceAccountName %q", name, ps.ServiceAccountName)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Errorf("%s: mounts a service account token it does not need", name)
	}
	sc := ps.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0 {
		t.Errorf("%s: pod not forced to a non-root user", name)
	}
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: no RuntimeDefault seccomp profile", name)
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range ps.Volumes {
		volumes[v.Name] = v
		switch {
		case v.EmptyDir != nil:
			if v.EmptyDir.SizeLimit == nil || v.EmptyDir.SizeLimit.IsZero() {
				t.Errorf("%s: emptyDir %s has no sizeLimit", name, v.Name)
			}
		case v.ConfigMap != nil:
			if v.ConfigMap.Name != p.cm.Name {
				t.Errorf("%s: volume %s: ConfigMap %q is not rendered (have %q)", name, v.Name, v.ConfigMap.Name, p.cm.Name)
			}
		case v.Secret != nil:
			if p.secrets[v.Secret.SecretName] == nil {
				t.Errorf("%s: volume %s: no template for Secret %q", name, v.Name, v.Secret.SecretName)
			}
		default:
			t.Errorf("%s: volume %s: only configMap, secret and emptyDir volumes are expected", name, v.Name)
		}
	}
	if len(ps.Containers) != 1 || len(ps.InitContainers) != 0 {
		t.Errorf("%s: %d containers, want lifeboat alone", name, len(ps.Containers))
		return nil
	}
	c := &ps.Containers[0]
	if c.Image == "" || !strings.Contains(c.Image, "lifeboat") || !strings.Contains(c.Image, ":") {
		t.Errorf("%s: image %q is not a pinned lifeboat image", name, c.Image)
	}
	csc := c.SecurityContext
	switch {
	case csc == nil:
		t.Errorf("%s: container has no securityContext", name)
	default:
		if csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem {
			t.Errorf("%s: root filesystem is writable", name)
		}
		if csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation {
			t.Errorf("%s: privilege escalation allowed", name)
		}
		if csc.Capabilities == nil || !slices.Contains(csc.Capabilities.Drop, "ALL") || len(csc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities not all dropped", name)
		}
		if csc.Privileged != nil && *csc.Privileged {
			t.Errorf("%s: privileged", name)
		}
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory, corev1.ResourceEphemeralStorage} {
		req, lim := c.Resources.Requests[r], c.Resources.Limits[r]
		if req.IsZero() || lim.IsZero() {
			t.Errorf("%s: %s request and limit must both be set", name, r)
		} else if req.Cmp(lim) > 0 {
			t.Errorf("%s: %s request %s above limit %s", name, r, req.String(), lim.String())
		}
	}
	// Every emptyDir must fit in the ephemeral-storage limit, or the
	// kubelet evicts the pod before the emptyDir is full.
	var sum resource.Quantity
	for _, v := range ps.Volumes {
		if v.EmptyDir != nil && v.EmptyDir.SizeLimit != nil {
			sum.Add(*v.EmptyDir.SizeLimit)
		}
	}
	if lim := c.Resources.Limits[corev1.ResourceEphemeralStorage]; lim.Cmp(sum) < 0 {
		t.Errorf("%s: ephemeral-storage limit %s below the emptyDirs' %s", name, lim.String(), sum.String())
	}
	for _, m := range c.VolumeMounts {
		if _, ok := volumes[m.Name]; !ok {
			t.Errorf("%s: mount %s: no such volume", name, m.Name)
		}
	}
	for _, e := range c.EnvFrom {
		if e.SecretRef != nil && p.secrets[e.SecretRef.Name] == nil {
			t.Errorf("%s: envFrom: no template for Secret %q", name, e.SecretRef.Name)
		}
	}
	// --config names config.yaml inside the ConfigMap's mount.
	var cfgPath string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, configFlag); ok {
			cfgPath = v
		}
	}
	if v, key := p.mountAt(c, volumes, cfgPath); v == nil || v.ConfigMap == nil || key != configKey {
		t.Errorf("%s: --config %q is not %s of the ConfigMap's mount", name, cfgPath, configKey)
	}
	// The etcd client files are keys of the etcd Secret's mount.
	for _, k := range []string{"etcd.cacert", "etcd.cert", "etcd.key"} {
		v, key := p.mountAt(c, volumes, p.paths[k])
		if v == nil || v.Secret == nil || v.Secret.SecretName != etcdSecret ||
			!slices.Contains(secretKeys(p.secrets[etcdSecret]), key) {
			t.Errorf("%s: config %s %q is not a key of the mounted Secret %s", name, k, p.paths[k], etcdSecret)
		}
	}
	// The age identity, when configured, is read at start by every
	// command: each pod mounts it from the lifeboat-age Secret.
	if idf := p.paths["encryption.identity_file"]; idf != "" {
		v, key := p.mountAt(c, volumes, idf)
		if v == nil || v.Secret == nil || p.secrets[v.Secret.SecretName] == nil ||
			!slices.Contains(secretKeys(p.secrets[v.Secret.SecretName]), key) {
			t.Errorf("%s: encryption.identity_file %q is not a key of a mounted Secret", name, idf)
		}
	}
	return c
}

// needPath checks that each config key's directory is an emptyDir mount.
func (p pod) needPath(name string, c *corev1.Container, keys ...string) {
	p.t.Helper()
	for _, k := range keys {
		dir := p.paths[k]
		found := false
		for _, m := range c.VolumeMounts {
			if path.Clean(m.MountPath) == path.Clean(dir) && !m.ReadOnly {
				found = true
			}
		}
		if !found {
			p.t.Errorf("%s: config %s %q is not a writable mount (the root filesystem is read-only)", name, k, dir)
		}
	}
}

// mountAt returns the volume mounted at file's directory and the file's name.
func (p pod) mountAt(c *corev1.Container, volumes map[string]corev1.Volume, file string) (*corev1.Volume, string) {
	if file == "" {
		return nil, ""
	}
	for _, m := range c.VolumeMounts {
		if path.Clean(m.MountPath) == path.Dir(file) {
			v := volumes[m.Name]
			return &v, path.Base(file)
		}
	}
	return nil, ""
}

func hasEnv(c *corev1.Container, name string) bool {
	return slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == name && e.Value != "" })
}

func first[T runtime.Object](objs []runtime.Object) (T, bool) {
	for _, o := range objs {
		if v, ok := o.(T); ok {
			return v, true
		}
	}
	var zero T
	return zero, false
}

func meta(o runtime.Object) metav1.ObjectMeta {
	switch v := o.(type) {
	case *serviceMonitor:
		return v.ObjectMeta
	case *prometheusRule:
		return v.ObjectMeta
	case metav1.Object:
		return metav1.ObjectMeta{Name: v.GetName(), Namespace: v.GetNamespace(), Labels: v.GetLabels()}
	}
	return metav1.ObjectMeta{}
}

func kind(o runtime.Object) string {
	switch o.(type) {
	case *serviceMonitor:
		return "ServiceMonitor"
	case *prometheusRule:
		return "PrometheusRule"
	}
	if k := o.GetObjectKind().GroupVersionKind().Kind; k != "" {
		return k
	}
	return fmt.Sprintf("%T", o)
}
