package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// The node's files as kubeadm wrote them.
const (
	nodePKI          = "/etc/kubernetes/pki/"
	nodeManifests    = "/etc/kubernetes/manifests/"
	nodeJournal      = "/etc/kubernetes/lifeboat/restore.json"
	encryptionConfig = nodePKI + "lifeboat-test-encryption.yaml" // in the apiserver's k8s-certs hostPath
	encryptedPrefix  = "k8s:enc:aescbc:v1:key1:"
)

// TestKubeadmRestoreToTime is `lifeboat restore --kubeadm --to-time
// --with-kit` on a real kubeadm node whose apiserver encrypts Secrets at
// rest: a backup with the node's recovery kit (the kit laid back first, the
// encryption config as it was, the one there moved aside); a `lifeboat
// agent` on the host captures the node's etcd with kubeadm's
// certificates; namespace shop (a Deployment, ConfigMaps, a Secret stored
// encrypted) is deleted; the restore to a time before the deletion brings
// it back with its values, the Secret still encrypted in etcd and readable
// through the apiserver, the Deployment's pods running in new containers,
// and a Deployment created afterwards reconciled. Before it, the refusals
// on the same node, each a non-zero exit with a clear error and nothing
// moved: not root, manifests that are not kubeadm's, a peer member that
// answers, a time outside every capture window.
func TestKubeadmRestoreToTime(t *testing.T) {
	if testing.Short() {
		t.Skip("a kubeadm node")
	}
	l := newLifeboat(t)
	// Registered before Start: runs after the node's teardown, which
	// removes the data dirs its restores left beside /var/lib/etcd too.
	t.Cleanup(func() {
		if left, _ := filepath.Glob("/var/lib/etcd.lifeboat-*"); len(left) > 0 && os.Getenv("KUBEADMTEST_KEEP") != "1" {
			t.Errorf("after the node's teardown: %d data dirs of its restores left: %v", len(left), left)
		}
	})
	n := kubeadmtest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 25*time.Minute)
	defer cancel()
	kubectl := nodeKubectl(ctx, t, n)
	encryptSecrets(ctx, t, n, kubectl)
	cli := nodeEtcd(t, n)

	pause := pauseImage(ctx, t, n, kubectl)
	manifest := filepath.Join(t.TempDir(), "shop.yaml")
	if err := os.WriteFile(manifest, []byte(strings.ReplaceAll(shopManifest, "PAUSE", pause)), 0o600); err != nil {
		t.Fatal(err)
	}
	l.flags = append(l.flags, "--cacert", nodePKI+"etcd/ca.crt", "--cert", nodePKI+"apiserver-etcd-client.crt", "--key", nodePKI+"apiserver-etcd-client.key")
	// A backup with the node's recovery kit (PKI, the encryption config),
	// which --with-kit lays back first.
	kid, idFile := kittest.Identity(t, t.TempDir())
	l.run(t, "snapshot", "--endpoints", "https://"+n.IP+":2379", "--kit-path", "kubeadm", "--kit-root", "/", "--recipient", kid.Recipient().String())
	encConfig, err := os.ReadFile(encryptionConfig)
	if err != nil {
		t.Fatal(err)
	}
	capt := l.capture(t, []string{"https://" + n.IP + ":2379"})
	anchor := capt.waitCaptured(t, currentRevision(t, cli))
	t.Logf("capture generation %s from revision %d", anchor.Generation, anchor.FromRevision)

	kubectl("apply", "-f", manifest)
	kubectl("wait", "-n", "shop", "--for=condition=Available", "deployment/web", "--timeout=180s")
	checkEncrypted(t, cli, "/registry/secrets/shop/till")
	var before []string
	for deadline := time.Now().Add(time.Minute); len(before) < 2 && time.Now().Before(deadline); time.Sleep(time.Second) {
		before = webContainers(kubectl)
	}
	captured := capt.waitCaptured(t, currentRevision(t, cli))
	target := time.Now().UTC()
	time.Sleep(1100 * time.Millisecond) // the deletion after target by more than the times' resolution
	kubeadmRefusals(t, l, n, target, anchor)

	kubectl("delete", "namespace", "shop", "--timeout=120s")
	capt.waitCaptured(t, currentRevision(t, cli))
	capt.stop(t) // the capture of the old cluster ends with it
	t.Logf("target %s: captured through revision %d then; the namespace deleted after", target.Format(time.RFC3339Nano), captured.Through)

	code, out, took := kubeadmRestore(t, l, n, nil, "--to-time", target.Format(time.RFC3339Nano), "--with-kit", "--identity-file", idFile)
	if code != 0 {
		t.Fatalf("restore --to-time: exit %d", code)
	}
	if got, err := os.ReadFile(encryptionConfig); err != nil || !bytes.Equal(got, encConfig) {
		t.Errorf("%s after the kit was restored: %v, want it as it was", encryptionConfig, err)
	}
	if aside, _ := filepath.Glob(encryptionConfig + ".lifeboat-old-*"); len(aside) != 1 {
		t.Errorf("the encryption config the kit replaced, moved aside: %v, want one", aside)
	}
	for _, s := range []string{"(point in time)", "readyz ok", "recovery time", "hashkv", "restored below /\n"} {
		if !strings.Contains(out, s) {
			t.Errorf("restore output lacks %q", s)
		}
	}
	start := time.Now()
	checkShop(t, kubectl, before)
	t.Logf("RTO --to-time: %.1fs from the command to a ready apiserver, %.1fs to the Deployment available again", took.Seconds(), took.Seconds()+time.Since(start).Seconds())
	cli = nodeEtcd(t, n) // the restored member
	checkEncrypted(t, cli, "/registry/secrets/shop/till")

	kubectl("create", "deployment", "-n", "shop", "after", "--image", pause, "--replicas", "1")
	kubectl("wait", "-n", "shop", "--for=condition=Available", "deployment/after", "--timeout=180s")
}

// kubeadmRefusals runs restore --kubeadm where it must refuse, each with
// a non-zero exit, the error it must say, and the manifests and data dir as they
// were.
func kubeadmRefusals(t *testing.T, l *lifeboat, n *kubeadmtest.Node, target time.Time, w window) {
	t.Helper()
	state := nodeState(t)
	refused := func(what, want string, code int, out string) {
		t.Helper()
		if code <= 0 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, want non-zero and %q:\n%s", what, code, want, out)
		}
		if now := nodeState(t); now != state {
			t.Fatalf("%s: the node changed:\nbefore:\n%s\nafter:\n%s", what, state, now)
		}
	}
	at := target.Format(time.RFC3339Nano)

	code, out := asNobody(t, l, n, "--to-time", at)
	refused("not root", "run as root", code, out)

	early := w.FromTime.Add(-time.Hour).UTC().Format(time.RFC3339)
	code, out, _ = kubeadmRestore(t, l, n, nil, "--to-time", early)
	refused("a time before every window", "nothing was changed", code, out)

	// Manifests that are not kubeadm's: the node's own files are left
	// alone, a private mount namespace shows the command another
	// manifests directory.
	etcdYAML, err := os.ReadFile(nodeManifests + "etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	notKubeadm := strings.Replace(string(etcdYAML), "component: etcd", "component: my-etcd", 1)
	code, out = withManifest(t, l, n, notKubeadm, "--to-time", at)
	refused("manifests not kubeadm's", "not a kubeadm control-plane node", code, out)

	peer, err := net.Listen("tcp", "10.250.0.1:0") // the host side of the node's veth: reachable from the node
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	go func() {
		for {
			c, err := peer.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// The members come from etcd (its member list: this node alone), or
	// from --initial-cluster as the command printed for other nodes gives
	// it: here naming a second member that answers.
	twoMembers := fmt.Sprintf("%s=https://%s:2380,node-b=https://%s", nodeName(t, string(etcdYAML)), n.IP, peer.Addr())
	code, out, _ = kubeadmRestore(t, l, n, nil, "--to-time", at, "--initial-cluster", twoMembers)
	refused("a running peer", "other members that are still running (node-b=https://"+peer.Addr().String(), code, out)
}

// nodeName is etcd's --name in the manifest.
func nodeName(t *testing.T, manifest string) string {
	t.Helper()
	_, rest, ok := strings.Cut(manifest, "--name=")
	if !ok {
		t.Fatal("etcd.yaml has no --name=")
	}
	return strings.Fields(rest)[0]
}

// nodeState lists the static pod manifests (names, sizes), whether a
// journal exists and the data dirs next to /var/lib/etcd.
func nodeState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, glob := range []string{nodeManifests + "*", "/etc/kubernetes/lifeboat/*", "/var/lib/etcd*"} {
		m, _ := filepath.Glob(glob)
		for _, f := range m {
			fi, err := os.Stat(f)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %d %v\n", f, fi.Size(), fi.IsDir())
		}
	}
	return b.String()
}

// asNobody runs restore --kubeadm args as user nobody in the node.
func asNobody(t *testing.T, l *lifeboat, n *kubeadmtest.Node, args ...string) (int, string) {
	t.Helper()
	spool := filepath.Join(t.TempDir(), "spool")
	args = append([]string{"--reuid=65534", "--regid=65534", "--clear-groups", l.bin, "restore", "--kubeadm"}, args...)
	args = append(append(args, "--store", l.store, "--spool-dir", spool), l.flags...)
	return runNode(t, n, "setpriv", args...)
}

// withManifest runs restore --kubeadm args in the node with etcd.yaml
// replaced by manifest in a private mount namespace (a tmpfs over the
// manifests directory holding it and a copy of kube-apiserver.yaml).
func withManifest(t *testing.T, l *lifeboat, n *kubeadmtest.Node, manifest string, args ...string) (int, string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd.yaml"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	args = append(append([]string{"restore", "--kubeadm"}, args...), "--store", l.store, "--spool-dir", l.spool)
	args = append(args, l.flags...)
	script := fmt.Sprintf(`set -e
mount -t tmpfs lifeboat-test %[1]s
cp %[2]s/etcd.yaml %[1]s/etcd.yaml
cp %[3]s %[1]s/kube-apiserver.yaml
exec "$@"`, nodeManifests, dir, apiserverCopy(t))
	return runNode(t, n, "unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "sh", l.bin}, args...)...)
}

// apiserverCopy copies the node's kube-apiserver.yaml to a file of the
// test's (the mount namespace's tmpfs hides the original).
func apiserverCopy(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(nodeManifests + "kube-apiserver.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "kube-apiserver.yaml")
	if err := os.WriteFile(f, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// runNode runs name args in the node's network namespace and returns the
// exit code and the combined output.
func runNode(t *testing.T, n *kubeadmtest.Node, name string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := n.Command(ctx, name, args...)
	cmd.Env = cleanEnv()
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b.String())
	}
	t.Logf("%s %s: exit %d\n%s", name, strings.Join(args, " "), code, b.String())
	return code, b.String()
}

// nodeKubectl is kubectl on the node, failing the test on an error.
func nodeKubectl(ctx context.Context, t testing.TB, n *kubeadmtest.Node) func(...string) string {
	return func(args ...string) string {
		t.Helper()
		out, err := n.Kubectl(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, n.Tails())
		}
		return out
	}
}

// pauseImage is the node's pause image (never pulled).
func pauseImage(ctx context.Context, t testing.TB, n *kubeadmtest.Node, kubectl func(...string) string) string {
	t.Helper()
	etcd := kubectl("get", "pod", "-n", "kube-system", "-l", "component=etcd", "-o", "jsonpath={.items[0].spec.containers[0].image}")
	pause := strings.Replace(etcd[:strings.LastIndex(etcd, ":")], "/etcd", "/pause", 1)
	tags, err := exec.CommandContext(ctx, filepath.Join(n.Bin, "kubeadm"), "config", "images", "list", "--image-repository", "lifeboat.local", "--kubernetes-version", "v1.37.2").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range strings.Fields(string(tags)) {
		if strings.HasPrefix(img, pause+":") {
			return img
		}
	}
	return pause
}

// encryptSecrets turns encryption at rest on, as an admin does on a
// kubeadm node: an aescbc EncryptionConfiguration for Secrets in a
// directory the apiserver mounts, --encryption-provider-config in its
// manifest; it waits until a Secret created then is stored encrypted.
func encryptSecrets(ctx context.Context, t *testing.T, n *kubeadmtest.Node, kubectl func(...string) string) {
	t.Helper()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	cfg := `apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
      - aescbc:
          keys:
            - name: key1
              secret: ` + base64.StdEncoding.EncodeToString(key) + `
      - identity: {}
`
	if err := os.WriteFile(encryptionConfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	file := nodeManifests + "kube-apiserver.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(data), "    - kube-apiserver\n", "    - kube-apiserver\n    - --encryption-provider-config="+encryptionConfig+"\n", 1)
	if edited == string(data) {
		t.Fatalf("%s: no command line `    - kube-apiserver`", file)
	}
	if err := os.WriteFile(file, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	cli := nodeEtcd(t, n)
	for i, deadline := 0, time.Now().Add(4*time.Minute); ; i++ {
		name := fmt.Sprintf("probe-%d", i)
		if _, err := n.Kubectl(ctx, "create", "secret", "generic", "-n", "default", name, "--from-literal=k=v"); err == nil {
			resp, err := cli.Get(ctx, "/registry/secrets/default/"+name)
			if err == nil && len(resp.Kvs) == 1 && bytes.HasPrefix(resp.Kvs[0].Value, []byte(encryptedPrefix)) {
				t.Logf("the apiserver encrypts Secrets at rest (probe %d)", i)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the apiserver does not encrypt Secrets 4 minutes after --encryption-provider-config\n%s", n.Tails())
		}
		time.Sleep(3 * time.Second) // kubelet restarting the apiserver
	}
}

// checkEncrypted checks that key is stored encrypted (aescbc) in etcd.
func checkEncrypted(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || !bytes.HasPrefix(resp.Kvs[0].Value, []byte(encryptedPrefix)) || bytes.Contains(resp.Kvs[0].Value, []byte("4711")) {
		t.Fatalf("%s in etcd: %d values, want one starting %q without the plain value", key, len(resp.Kvs), encryptedPrefix)
	}
}

// nodeEtcd is a client of the node's etcd with the apiserver's
// certificate, closed at the test's end.
func nodeEtcd(t testing.TB, n *kubeadmtest.Node) *clientv3.Client {
	t.Helper()
	return nodeEtcdAt(t, "https://"+n.IP+":2379")
}

// nodeEtcdAt is nodeEtcd of the member at endpoint.
func nodeEtcdAt(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(nodePKI+"apiserver-etcd-client.crt", nodePKI+"apiserver-etcd-client.key")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(nodePKI + "etcd/ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		TLS: &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
