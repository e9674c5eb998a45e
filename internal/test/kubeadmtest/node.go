// Package kubeadmtest brings up a real single-node kubeadm control plane
// (kubelet, containerd, static pods for etcd, kube-apiserver,
// kube-controller-manager and kube-scheduler) on this machine for tests,
// and tears it down.
//
// Start runs scripts/kubeadm-node.sh up: a network namespace of its own
// (the node at 10.250.0.2, the host side of a veth pair at 10.250.0.1, the
// pod bridge inside it), containerd with its own root and socket, the
// images of .bin/kube-images.tar imported, kubeadm init with kubelet
// started by hand, no coredns and no kube-proxy. It waits until the
// apiserver answers /readyz at https://10.250.0.2:6443 and the node is
// Ready. t.Cleanup runs scripts/kubeadm-node.sh down, which removes every
// process, mount, cgroup, namespace (with its iptables chains) and file the
// node made; up runs it first too, so a test killed before its cleanup
// leaves nothing the next Start trips on. One node runs on a machine at a
// time (its paths are kubeadm's own: /etc/kubernetes, /var/lib/kubelet,
// /var/lib/etcd): Start holds a lock for the test's life.
//
// NODE_LOGS names a directory for the node's logs that outlives the test;
// KUBEADMTEST_KEEP=1 leaves the node up after the test (to look at it;
// make kubeadm-down removes it). The binaries and images come from make kubeadm-tools (scripts/build-kube.sh,
// scripts/build-kube-images.sh, scripts/install-node-packages.sh); KUBE_BIN
// names another directory. A test that needs the node is skipped with
// -short; without root or the tools it is skipped with what to run, and
// under CI=true it fails instead.
//
// The package is test harness: shipped code never imports it. It does not
// run lifeboat on the node; the tests that use it do.
package kubeadmtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Node is a running kubeadm control-plane node.
type Node struct {
	// IP is the node's address (its etcd, 2379, and apiserver, 6443,
	// answer there from the host).
	IP string
	// NetNS is the node's network namespace file (nsenter --net=NetNS).
	NetNS string
	// Kubeconfig is kubeadm's admin.conf.
	Kubeconfig string
	// Containerd is the node's containerd socket (ctr --address).
	Containerd string
	// Bin is the directory of kubelet, kubeadm and kubectl.
	Bin string
	// Logs holds kubeadm.log, kubelet.log and containerd.log.
	Logs string
	// StartSeconds is how long up took (network to node Ready).
	StartSeconds float64

	repo string   // the repository (its scripts)
	env  []string // the scripts' environment
}

// Repo returns the repository's root (the directory of go.mod above the
// working directory).
func Repo(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "scripts/kubeadm-node.sh")); err == nil {
				return dir
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("kubeadmtest: no repository root (go.mod with scripts/kubeadm-node.sh) above the working directory")
		}
		dir = parent
	}
}

// unavailable skips the test, or fails it under CI=true.
func unavailable(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("kubeadm node unavailable (CI=true): %s", msg)
	}
	t.Skipf("kubeadm node unavailable: %s", msg)
}

// Start brings up the node and tears it down at the test's end.
func Start(t testing.TB) *Node {
	t.Helper()
	if testing.Short() {
		t.Skip("kubeadm node: skipped with -short")
	}
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (kubelet, containerd, network namespaces)")
	}
	repo := Repo(t)
	bin := os.Getenv("KUBE_BIN")
	if bin == "" {
		bin = filepath.Join(repo, ".bin")
	}
	for _, f := range []string{"kubelet", "kubeadm", "kubectl", "kube-images.tar"} {
		if _, err := os.Stat(filepath.Join(bin, f)); err != nil {
			unavailable(t, "%s: %v: run make kubeadm-tools", filepath.Join(bin, f), err)
		}
	}
	if _, err := exec.LookPath("containerd"); err != nil {
		unavailable(t, "containerd not installed: run make kubeadm-tools (scripts/install-node-packages.sh)")
	}
	unlock := lock(t)
	logs := os.Getenv("NODE_LOGS")
	if logs == "" {
		logs = filepath.Join(t.TempDir(), "node")
	}
	keep := os.Getenv("KUBEADMTEST_KEEP") == "1"
	script := filepath.Join(repo, "scripts/kubeadm-node.sh")
	env := append(os.Environ(), "KUBE_BIN="+bin, "NODE_LOGS="+logs)
	down := func() {
		if keep {
			t.Logf("KUBEADMTEST_KEEP=1: the node stays up (make kubeadm-down removes it); logs in %s", logs)
			unlock()
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, script, "down")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("kubeadm node teardown: %v\n%s", err, out)
		}
		unlock()
	}
	t.Cleanup(down)
	// Two tries of up, each with kubeadm's 8 min control-plane check at
	// worst; a loaded machine has needed 2–4 min for one.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, script, "up")
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubeadm node up: %v\n%s\n%s", err, stderr.String(), tails(logs))
	}
	n := &Node{Bin: bin, Logs: logs, StartSeconds: time.Since(start).Seconds(), repo: repo, env: env}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "NODE_IP":
			n.IP = v
		case "NETNS":
			n.NetNS = v
		case "KUBECONFIG":
			n.Kubeconfig = v
		case "CONTAINERD":
			n.Containerd = v
		}
	}
	if n.IP == "" || n.NetNS == "" || n.Kubeconfig == "" || n.Containerd == "" {
		t.Fatalf("kubeadm node up printed no NODE_IP, NETNS, KUBECONFIG and CONTAINERD:\n%s", out)
	}
	t.Logf("kubeadm node up at %s in %.1fs", n.IP, n.StartSeconds)
	return n
}

// lock takes the machine's one node lock (flock on
// /run/lifeboat-kubeadm.lock) and returns its release.
func lock(t testing.TB) func() {
	t.Helper()
	f, err := os.OpenFile("/run/lifeboat-kubeadm.lock", os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("kubeadm node lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("kubeadm node lock %s: %v", f.Name(), err)
	}
	return func() { f.Close() }
}

// tails is the last lines of the node's logs, for a failure message.
func tails(dir string) string {
	var b strings.Builder
	for _, f := range []string{"kubeadm.log", "kubelet.log", "containerd.log"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "--- %s (last lines)\n%s\n", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// Kubectl runs kubectl with the node's admin kubeconfig and returns its
// standard output; the error carries its standard error.
func (n *Node) Kubectl(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, filepath.Join(n.Bin, "kubectl"), args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.Kubeconfig)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// ImportImage imports the OCI image layout dir (make image's .bin/image)
// into the node's containerd, where kubelet finds it (namespace k8s.io),
// as `ctr -n k8s.io images import` of its tar, and returns the image's
// name: the layout's io.containerd.image.name annotation (e.g.
// docker.io/library/lifeboat:v1.2.3). Only that entry of the layout's
// index is imported (the layout also tags each platform's manifest alone,
// for umoci). Pods run it with imagePullPolicy Never: nothing is pulled.
func (n *Node) ImportImage(ctx context.Context, dir string) (string, error) {
	data, err := os.ReadFile(filepath.Join(dir, "index.json"))
	if err != nil {
		return "", fmt.Errorf("image layout: %w", err)
	}
	var index map[string]any
	if err := json.Unmarshal(data, &index); err != nil {
		return "", fmt.Errorf("image layout %s/index.json: %w", dir, err)
	}
	entries, _ := index["manifests"].([]any)
	var name string
	for _, e := range entries {
		a, _ := e.(map[string]any)["annotations"].(map[string]any)
		if v, ok := a["io.containerd.image.name"].(string); ok && v != "" {
			if name != "" {
				return "", fmt.Errorf("image layout %s/index.json: two entries named by io.containerd.image.name", dir)
			}
			name, index["manifests"] = v, []any{e}
		}
	}
	if name == "" {
		return "", fmt.Errorf("image layout %s/index.json: no entry named by io.containerd.image.name", dir)
	}
	// The archive: the layout with an index of the named entry alone.
	work, err := os.MkdirTemp("", "lifeboat-image-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	named, err := json.Marshal(index)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "index.json"), named, 0o600); err != nil {
		return "", err
	}
	archive := filepath.Join(work, "image.tar")
	tar := exec.CommandContext(ctx, "tar", "-cf", archive, "-C", work, "index.json", "-C", dir, "oci-layout", "blobs")
	if out, err := tar.CombinedOutput(); err != nil {
		return "", fmt.Errorf("tar of the image layout %s: %w\n%s", dir, err, out)
	}
	cmd := exec.CommandContext(ctx, "ctr", "--address", n.Containerd, "-n", "k8s.io", "images", "import", "--all-platforms", archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("ctr images import %s: %w\n%s", dir, err, out)
	}
	return name, nil
}

// Command is name with args run inside the node's network namespace (as a
// process on the node would run: its 127.0.0.1 is the node's).
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + n.NetNS, name}, args...)...)
}

// Tails returns the last lines of the node's logs (kubeadm, kubelet,
// containerd), for a failure message.
func (n *Node) Tails() string { return tails(n.Logs) }

// RestartKubelet restarts kubelet as `systemctl restart kubelet` does on
// a real node (scripts/kubeadm-node.sh restart-kubelet).
func (n *Node) RestartKubelet(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(n.repo, "scripts/kubeadm-node.sh"), "restart-kubelet")
	cmd.Env = n.env
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("restart kubelet: %w\n%s", err, out)
	}
	return nil
}
