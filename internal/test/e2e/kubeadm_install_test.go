package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// installNS is the namespace of TestKubeadmInstall's releases: Pod
// Security restricted, enforced.
const installNS = "lb-restricted"

// nodeS3Port is the port of the versitygw TestKubeadmInstall runs on the
// node's address, inside the node's network namespace.
const nodeS3Port = 7070

// installValues are the values both releases of TestKubeadmInstall share:
// the chart's documented Helm install (docs/deploy-kubernetes.md): the etcd
// client certificate and the S3 keys from Secrets, the node's etcd by its
// address, the store an S3 server; nothing of the host mounted, so
// restricted Pod Security admits the pods. MODE, CLUSTER and EXTRA differ.
const installValues = `mode: MODE
image: {repository: REPO, tag: "TAG", pullPolicy: Never}
config:
  cluster: CLUSTER
  etcd:
    endpoints: ["https://NODE:2379"]
  store:
    url: s3://lifeboat/k
    s3: {endpoint: "http://NODE:PORT", path_style: true, region: us-east-1}
credentials:
  etcd: {existingSecret: lifeboat-etcd-client}
  s3: {existingSecret: lifeboat-s3}
# kubernetesObjects (on by default): the node runs no kube-proxy, so the
# pods reach the apiserver at the node's address (as in kubeadmCertsChart).
extraEnv:
  - {name: KUBERNETES_SERVICE_HOST, value: "NODE"}
  - {name: KUBERNETES_SERVICE_PORT, value: "6443"}
EXTRA`

// cronValues: the backup CronJob every minute, the drill's a day away.
const cronValues = `cronjob:
  backup: {schedule: "* * * * *"}
  drill: {schedule: "SCHED"}
`

// agentValues: the agent daemon with continuous capture, no scheduled
// snapshot (capture anchors its generation on a snapshot of its own).
const agentValues = `capture: {enabled: true}
`

// TestKubeadmInstall is lifeboat on the kubeadm node as users install it,
// every way on one node (one node start for all of them):
//   - cronjob mode with kubeadm's hostPath certificates
//     (kubeadmCertsChart): Jobs from the CronJobs back up and drill, and
//     `kubectl get etcdbackups` lists the backup;
//   - Pod Security: a namespace with restricted enforced (a pod with a
//     hostPath is refused there, so the label is in force), the chart's
//     pods of both modes admitted and running in it: the etcd certificate
//     and the S3 keys from Secrets, the store a versitygw on the node's
//     address; kubeadm's hostPath mode is warned at baseline (hostPath), so
//     it needs privileged, as the chart's docs say.
//   - cronjob mode on its own schedule: the backup CronJob every minute, a
//     Job the CronJob controller made completes and its backup is stored;
//     a Job from the drill CronJob passes its drill.
//   - deployment mode with capture: the agent pod runs and captures (a
//     recoverable window in `lifeboat list` run from the host through a
//     ConfigMap written after it started), and its /metrics, scraped
//     through the apiserver's pod proxy, has capture up at that revision.
//   - the install notes' commands for the agent: `kubectl exec ... lifeboat
//     list` lists the window; port-forward to the Service and /status.
//   - the units without systemd: ExecStart of deploy/systemd/lifeboat.service
//     as it stands, run on the node (see unitCommand): a backup, a passed
//     drill, READY, WATCHDOG and STOPPING; then lifeboat-once.service's: a
//     backup and its node_exporter textfile.
func TestKubeadmInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("a kubeadm node")
	}
	l := newLifeboat(t)
	layout := needImageLayout(t)
	helm := etcdtest.NeedBinary(t, "HELM_BIN", "helm")
	s3bin := etcdtest.NeedBinary(t, "VERSITYGW", "versitygw")
	n := kubeadmtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Minute)
	defer cancel()
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := n.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, n.Tails())
		}
		return out
	}
	s3 := startNodeS3(t, ctx, n, s3bin)
	store := func(cluster string) *lifeboat {
		return &lifeboat{bin: l.bin, store: "s3://lifeboat/k", spool: l.spool,
			flags: []string{"--cluster", cluster, "--s3-endpoint", s3.Endpoint, "--s3-path-style", "--s3-region", s3.Region},
			env:   []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey, "AWS_EC2_METADATA_DISABLED=true"}}
	}

	// The unit first: it runs beside the releases.
	unit := runUnit(t, ctx, n, l.bin, s3)

	image, err := n.ImportImage(ctx, layout)
	if err != nil {
		t.Fatal(err)
	}
	kubeadmCertsChart(t, ctx, n, l, helm, image)
	restrictedNamespace(t, ctx, n, kubectl, s3)
	hostPathNeedsPrivileged(t, ctx, n, helm, kubectl)
	helmInstall(t, ctx, n, helm, image, "cron", "cronjob", cronValues)
	notes := helmInstall(t, ctx, n, helm, image, "agent", "deployment", agentValues)

	scheduledBackup(t, ctx, n, kubectl, store("cron"))
	w := captureOnNode(t, ctx, n, kubectl, store("agent"))
	notesCommands(t, ctx, n, notes, w)
	unit.check(t, store("unit"))
	runOnce(t, ctx, n, l.bin, s3, store("once"))
}

// helmInstall installs the chart as release in installNS with
// installValues of mode and extra and image (as imported), and returns
// what helm printed (the install notes). Pod Security warnings fail the
// test: the namespace warns at restricted too, which also checks the pod
// templates of CronJobs before any pod runs. The same objects are
// created with a server dry run by kubectl first, whose warnings are
// known to show (hostPathNeedsPrivileged).
func helmInstall(t *testing.T, ctx context.Context, n *kubeadmtest.Node, helm, image, release, mode, extra string) string {
	t.Helper()
	i := strings.LastIndex(image, ":")
	away := time.Now().UTC().Add(12 * time.Hour)
	v := strings.NewReplacer("MODE", mode, "CLUSTER", release, "REPO", image[:i], "TAG", image[i+1:],
		"NODE", n.IP, "PORT", strconv.Itoa(nodeS3Port), "SCHED", fmt.Sprintf("%d %d * * *", away.Minute(), away.Hour())).
		Replace(strings.Replace(installValues, "EXTRA", extra, 1))
	values := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(values, []byte(v), 0o600); err != nil {
		t.Fatal(err)
	}
	// kubectl prints Pod Security's warnings (hostPathNeedsPrivileged
	// sees them); helm may not.
	if out := serverDryRun(t, ctx, n, helm, installNS, "-f", values); strings.Contains(out, "PodSecurity") {
		t.Errorf("the %s release's objects in the restricted namespace: Pod Security warnings:\n%s", release, out)
	}
	cmd := exec.CommandContext(ctx, helm, "install", release, filepath.Join(kubeadmtest.Repo(t), "deploy/helm/lifeboat"),
		"-f", values, "--namespace", installNS, "--kubeconfig", n.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helm install %s: %v\n%s", release, err, out)
	}
	if strings.Contains(string(out), "PodSecurity") {
		t.Errorf("helm install %s in the restricted namespace: Pod Security warnings:\n%s", release, out)
	}
	return string(out)
}

// startNodeS3 runs versitygw inside the node's network namespace on the
// node's address (pods reach it there; so does the host), with a bucket
// lifeboat, until the test ends.
func startNodeS3(t *testing.T, ctx context.Context, n *kubeadmtest.Node, bin string) *s3test.Server {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"data", "versions"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := &s3test.Server{Endpoint: fmt.Sprintf("http://%s:%d", n.IP, nodeS3Port), AccessKey: "lifeboat-node-access",
		SecretKey: "lifeboat-node-secret", Region: "us-east-1", Dir: dir}
	out := syncbuf.Buffer{Max: 4 << 10}
	cmd := n.Command(context.WithoutCancel(ctx), bin, "--port", fmt.Sprintf("%s:%d", n.IP, nodeS3Port),
		"--access", s.AccessKey, "--secret", s.SecretKey, "--region", s.Region, "--health", "/health",
		"posix", "--versioning-dir", filepath.Join(dir, "versions"), filepath.Join(dir, "data"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("versitygw on the node: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("versitygw on the node:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		resp, err := http.Get(s.Endpoint + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw on the node at %s not healthy in 30s: %v\n%s", s.Endpoint, err, out.String())
		}
	}
	s.CreateBucket(t, "lifeboat", false)
	return s
}

// restrictedNamespace makes installNS with restricted Pod Security
// enforced (and warned), the Secrets the releases name (kubeadm's
// healthcheck-client certificate as docs/deploy-kubernetes.md makes it,
// the S3 keys), and checks the label is in force: a pod with a hostPath is
// refused.
func restrictedNamespace(t *testing.T, ctx context.Context, n *kubeadmtest.Node, kubectl func(...string) string, s3 *s3test.Server) {
	t.Helper()
	kubectl("create", "namespace", installNS)
	kubectl("label", "namespace", installNS, "pod-security.kubernetes.io/enforce=restricted", "pod-security.kubernetes.io/warn=restricted")
	pki := "/etc/kubernetes/pki/etcd/"
	kubectl("create", "secret", "generic", "-n", installNS, "lifeboat-etcd-client", "--type=kubernetes.io/tls",
		"--from-file=ca.crt="+pki+"ca.crt", "--from-file=tls.crt="+pki+"healthcheck-client.crt", "--from-file=tls.key="+pki+"healthcheck-client.key")
	kubectl("create", "secret", "generic", "-n", installNS, "lifeboat-s3",
		"--from-literal=AWS_ACCESS_KEY_ID="+s3.AccessKey, "--from-literal=AWS_SECRET_ACCESS_KEY="+s3.SecretKey)
	pod := filepath.Join(t.TempDir(), "hostpath.yaml")
	spec := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"hostpath","namespace":"` + installNS + `"},
"spec":{"containers":[{"name":"c","image":"x"}],"volumes":[{"name":"h","hostPath":{"path":"/etc"}}]}}`
	if err := os.WriteFile(pod, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := n.Kubectl(ctx, "create", "--dry-run=server", "-f", pod)
	if err == nil || !strings.Contains(err.Error(), "violates PodSecurity") {
		t.Fatalf("a pod with a hostPath in the restricted namespace: %v, want it refused (violates PodSecurity)", err)
	}
}

// hostPathNeedsPrivileged: the chart in cronjob mode with kubeadm's
// hostPath certificates, created (server dry run) in a namespace that
// warns at baseline, is warned for its hostPath volumes: the docs'
// "needs privileged" holds (and kubectl shows Pod Security's warnings,
// which serverDryRun's other callers want none of).
func hostPathNeedsPrivileged(t *testing.T, ctx context.Context, n *kubeadmtest.Node, helm string, kubectl func(...string) string) {
	t.Helper()
	kubectl("create", "namespace", "lb-baseline")
	kubectl("label", "namespace", "lb-baseline", "pod-security.kubernetes.io/warn=baseline")
	out := serverDryRun(t, ctx, n, helm, "lb-baseline", "--set", "config.store.url=s3://b/p", "--set", "credentials.etcd.kubeadm.enabled=true")
	if !strings.Contains(out, `would violate PodSecurity "baseline:`) || !strings.Contains(out, "hostPath volumes") {
		t.Errorf("the kubeadm mode's CronJobs in a namespace warning at baseline: no hostPath warning:\n%s", out)
	}
}

// serverDryRun renders the chart (helm template with args) into ns and
// creates its objects with a server dry run (nothing is kept); it returns
// what kubectl printed, Pod Security's warnings among it.
func serverDryRun(t *testing.T, ctx context.Context, n *kubeadmtest.Node, helm, ns string, args ...string) string {
	t.Helper()
	render := exec.CommandContext(ctx, helm, append([]string{"template", "dry", filepath.Join(kubeadmtest.Repo(t), "deploy/helm/lifeboat"),
		"--namespace", ns}, args...)...)
	manifest, err := render.Output()
	if err != nil {
		t.Fatalf("helm template %s: %v", strings.Join(args, " "), err)
	}
	file := filepath.Join(t.TempDir(), "manifest.yaml")
	if err := os.WriteFile(file, manifest, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(n.Bin, "kubectl"), "create", "--dry-run=server", "-f", file)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl create --dry-run=server of helm template %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
