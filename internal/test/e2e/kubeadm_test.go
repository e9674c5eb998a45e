package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// shopManifest is a namespace with a Deployment (two pods of the node's
// pause image, never pulled), two ConfigMaps and a Secret.
const shopManifest = `apiVersion: v1
kind: Namespace
metadata: {name: shop}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: prices, namespace: shop}
data: {apple: "3", pear: "5"}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: stock, namespace: shop}
data: {apple: "120"}
---
apiVersion: v1
kind: Secret
metadata: {name: till, namespace: shop}
stringData: {code: "4711"}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - {name: web, image: PAUSE, imagePullPolicy: Never}
`

// kubeadmRestore runs `lifeboat restore --kubeadm args...` on the node as
// an admin would: inside its network namespace (its 127.0.0.1 is the
// node's), with the store and spool of l; env is added (the kill hook).
func kubeadmRestore(t testing.TB, l *lifeboat, n *kubeadmtest.Node, env []string, args ...string) (code int, out string, elapsed time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 8*time.Minute)
	defer cancel()
	args = append([]string{"restore", "--kubeadm"}, args...)
	args = append(args, "--store", l.store, "--spool-dir", l.spool, "--log-level", "error")
	cmd := n.Command(ctx, l.bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	start := time.Now()
	err := cmd.Run()
	elapsed = time.Since(start)
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode() // -1: killed by a signal
	case err != nil:
		t.Fatalf("lifeboat %s: %v\n%s", strings.Join(args, " "), err, b.String())
	}
	t.Logf("lifeboat %s: exit %d in %.1fs\n%s", strings.Join(args, " "), code, elapsed.Seconds(), b.String())
	return code, b.String(), elapsed
}

// TestKubeadmRestore is the 3 a.m. restore on a real kubeadm node: a
// namespace with a Deployment, ConfigMaps and a Secret; `lifeboat
// snapshot` against the node's etcd with its certificates; the namespace
// deleted; `lifeboat restore --kubeadm` killed with SIGKILL after the
// manifests moved, after the restore wrote and after the swap, each rerun
// going on from the journal, the last one finishing. The first restore
// runs in one go and measures the recovery time (the command until the
// apiserver is ready, and until the Deployment is available): the
// namespace and its objects are back with their values, the Deployment's
// pods run again in new containers and a Deployment created after the
// restore is reconciled. The second, of the same backup after the namespace
// is deleted again, is killed after each phase and rerun (its bump raised
// above the first's); --rollback then brings back the data without the
// namespace. Last, on the same node, a control plane of three members
// (restoreMembersOnNode).
func TestKubeadmRestore(t *testing.T) {
	if testing.Short() {
		t.Skip("a kubeadm node")
	}
	l := newLifeboat(t)
	n := kubeadmtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 35*time.Minute)
	defer cancel()
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := n.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, n.Tails())
		}
		return out
	}
	pause := kubectl("get", "pod", "-n", "kube-system", "-l", "component=etcd", "-o", "jsonpath={.items[0].spec.containers[0].image}")
	pause = strings.Replace(pause[:strings.LastIndex(pause, ":")], "/etcd", "/pause", 1)
	tags, err := exec.CommandContext(ctx, filepath.Join(n.Bin, "kubeadm"), "config", "images", "list", "--image-repository", "lifeboat.local", "--kubernetes-version", "v1.37.2").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range strings.Fields(string(tags)) {
		if strings.HasPrefix(img, pause+":") {
			pause = img
		}
	}
	manifest := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(shopManifest, "PAUSE", pause)), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "-f", manifest)
	kubectl("wait", "-n", "shop", "--for=condition=Available", "deployment/web", "--timeout=180s")
	var before []string
	for deadline := time.Now().Add(time.Minute); len(before) < 2 && time.Now().Before(deadline); time.Sleep(time.Second) {
		before = webContainers(kubectl)
	}

	pki := "/etc/kubernetes/pki/"
	l.flags = append(l.flags, "--cacert", pki+"etcd/ca.crt", "--cert", pki+"apiserver-etcd-client.crt", "--key", pki+"apiserver-etcd-client.key")
	id, rev := l.snapshot(t, "https://"+n.IP+":2379")
	t.Logf("backup %s at revision %d", id, rev)

	kubectl("delete", "namespace", "shop", "--timeout=120s")
	if out, err := n.Kubectl(ctx, "get", "namespace", "shop"); err == nil {
		t.Fatalf("namespace shop still there after its deletion:\n%s", out)
	}

	// A restore in one go: the recovery time.
	code, out, took := kubeadmRestore(t, l, n, nil, id)
	if code != 0 {
		t.Fatalf("restore: exit %d", code)
	}
	for _, s := range []string{"revision", "keys", "readyz ok", "recovery time", "namespaces"} {
		if !strings.Contains(out, s) {
			t.Errorf("restore output lacks %q", s)
		}
	}
	// Whether the apiserver outlives etcd (and is killed) depends on the
	// order kubelet stops the two pods in: both happen here
	// (restore/kubeadm's TestAPIServerPIDs checks which process is killed).
	t.Logf("apiserver killed by the restore: %v", strings.Contains(out, "kube-apiserver (pid"))
	start := time.Now()
	running := checkShop(t, kubectl, before)
	t.Logf("RTO: %.1fs from the command to a ready apiserver, %.1fs to the Deployment available again", took.Seconds(), took.Seconds()+time.Since(start).Seconds())

	// A Deployment created after the restore is reconciled: the
	// controllers and the scheduler watch the restored cluster.
	kubectl("create", "deployment", "-n", "shop", "after", "--image", pause, "--replicas", "1")
	kubectl("wait", "-n", "shop", "--for=condition=Available", "deployment/after", "--timeout=180s")

	// The same backup again, after the namespace is deleted again, killed
	// after each of three phases; every rerun goes on. Its revision is
	// raised above the first restore's, which every watcher has seen.
	kubectl("delete", "namespace", "shop", "--timeout=120s")
	for _, phase := range []string{"aside", "written", "swapped"} {
		code, out, _ := kubeadmRestore(t, l, n, []string{"LIFEBOAT_KUBEADM_KILL_AFTER=" + phase}, id)
		if code != -1 || !strings.Contains(out, "["+phase+"]") {
			t.Fatalf("restore killed after %s: exit %d, want killed (-1) after printing [%s]", phase, code, phase)
		}
		if phase == "written" && !strings.Contains(out, "the bump is raised") {
			t.Errorf("the second restore of the backup did not raise its bump:\n%s", out)
		}
	}
	code, out, _ = kubeadmRestore(t, l, n, nil)
	if code != 0 || !strings.Contains(out, "resuming the restore of backup "+id) {
		t.Fatalf("rerun of the killed restore: exit %d, want 0 and resuming", code)
	}
	checkShop(t, kubectl, append(before, running...))

	// --rollback: the data as it was before this restore: the namespace
	// deleted (again).
	if code, out, _ = kubeadmRestore(t, l, n, nil, "--rollback"); code != 0 {
		t.Fatalf("rollback: exit %d", code)
	}
	if out, err := n.Kubectl(ctx, "get", "namespace", "shop"); err == nil {
		t.Fatalf("namespace shop after the rollback:\n%s\nwant it gone, as before the second restore", out)
	}
	// The old data's revisions are below the restored ones kubelet has
	// seen: its watches wait for a revision that never comes ("too large
	// resource version") until it restarts, as the rollback says.
	if !strings.Contains(out, "systemctl restart kubelet") {
		t.Errorf("the rollback does not tell to restart kubelet:\n%s", out)
	}
	if err := n.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}

	// Last, on the same node: a control plane of three members.
	restoreMembersOnNode(t, ctx, n, l, kubectl)
}

// webContainers are the container ids of the Deployment's ready pods.
func webContainers(kubectl func(...string) string) []string {
	out := kubectl("get", "pods", "-n", "shop", "-l", "app=web", "-o",
		`jsonpath={range .items[*]}{.status.containerStatuses[0].ready}={.status.containerStatuses[0].containerID}{"\n"}{end}`)
	var ids []string
	for _, l := range strings.Fields(out) {
		if id, ok := strings.CutPrefix(l, "true="); ok && id != "" {
			ids = append(ids, id)
		}
	}
	return ids
}

// checkShop checks the namespace's objects and values and waits until the
// Deployment has two ready pods in containers none of which is one of old
// (the restored pod statuses name the containers that ran before: kubelet
// must start new ones); it returns their ids.
func checkShop(t testing.TB, kubectl func(...string) string, old []string) []string {
	t.Helper()
	for _, c := range []struct{ args, want string }{
		{"get configmap -n shop prices -o jsonpath={.data.apple}/{.data.pear}", "3/5"},
		{"get configmap -n shop stock -o jsonpath={.data.apple}", "120"},
		{"get secret -n shop till -o jsonpath={.data.code}", "NDcxMQ=="},
		{"get deployment -n shop web -o jsonpath={.spec.replicas}", "2"},
	} {
		if got := kubectl(strings.Fields(c.args)...); got != c.want {
			t.Errorf("kubectl %s = %q, want %q", c.args, got, c.want)
		}
	}
	var ids []string
	for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(time.Second) {
		ids = webContainers(kubectl)
		fresh := len(ids) == 2
		for _, id := range ids {
			if slices.Contains(old, id) {
				fresh = false
			}
		}
		if fresh {
			return ids
		}
	}
	t.Fatalf("the Deployment's pods after the restore: ready in containers %v, want two new ones (not %v)\n%s", ids, old,
		kubectl("get", "pods", "-n", "shop", "-o", "wide", "--show-labels"))
	return nil
}
