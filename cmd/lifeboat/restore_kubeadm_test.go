package main

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRestoreKubeadmChecklist: on a kubeadm control-plane node's layout
// restore prints the kubeadm steps after the etcd flags (and warns about
// manifests still in place and a restore without --bump-revision); on
// another host it prints none of them.
func TestRestoreKubeadmChecklist(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	node := t.TempDir()
	for _, d := range []string{"etc/kubernetes/manifests", "etc/kubernetes/pki/etcd"} {
		if err := os.MkdirAll(filepath.Join(node, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	defer func(old string) { kubeadmRoot = old }(kubeadmRoot)
	restoreOut := func(t *testing.T, root string, extra ...string) string {
		t.Helper()
		kubeadmRoot = root
		dir := filepath.Join(t.TempDir(), "etcd")
		args := append([]string{"restore", "latest", "--data-dir", dir, "--name", "cp1", "--initial-advertise-peer-urls", "https://10.0.0.11:2380"}, extra...)
		code, out, errOut := runCLI(t, nil, append(args, e.args...)...)
		if code != 0 {
			t.Fatalf("restore exit %d\n%s\n%s", code, out, errOut)
		}
		return out
	}
	steps := []string{
		"kubeadm control-plane node",
		"mv /etc/kubernetes/manifests/{etcd,kube-apiserver}.yaml /root/",
		"etcd-data hostPath",
		"copy it to /var/lib/etcd",
		"--initial-advertise-peer-urls",
		"mv /root/{etcd,kube-apiserver}.yaml /etc/kubernetes/manifests/",
		"systemctl restart kubelet",
		"kube-controller-manager|kube-scheduler",
	}

	t.Run("kubeadm node", func(t *testing.T) {
		out := restoreOut(t, node, "--bump-revision", "1000000000", "--mark-compacted")
		flags := strings.Index(out, "start each member with these flags")
		list := strings.Index(out, "kubeadm control-plane node")
		if flags < 0 || list < flags {
			t.Fatalf("no checklist after the etcd flags:\n%s", out)
		}
		for _, s := range steps {
			if !strings.Contains(out, s) {
				t.Errorf("checklist lacks %q:\n%s", s, out)
			}
		}
		for _, warning := range []string{"still in /etc/kubernetes/manifests", "without --bump-revision"} {
			if strings.Contains(out, warning) {
				t.Errorf("warns %q with the manifests out and the bump given:\n%s", warning, out)
			}
		}
	})

	t.Run("manifests still in place, no bump", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(node, "etc/kubernetes/manifests/etcd.yaml"), []byte("kind: Pod\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out := restoreOut(t, node)
		for _, warning := range []string{"etcd.yaml still in /etc/kubernetes/manifests", "without --bump-revision 1000000000 --mark-compacted"} {
			if !strings.Contains(out, warning) {
				t.Errorf("no warning %q:\n%s", warning, out)
			}
		}
	})

	t.Run("other host", func(t *testing.T) {
		out := restoreOut(t, t.TempDir())
		if strings.Contains(out, "kubeadm") {
			t.Errorf("kubeadm steps on a host without kubeadm's layout:\n%s", out)
		}
	})
}

// TestRestoreKubeadmRefuses: restore --kubeadm refuses, with exit 2 and
// nothing changed, without root, on a host that is not a kubeadm node,
// where etcd has another member that is still running (or any other
// member), a rollback without a journal, and flags that name what
// etcd.yaml says.
func TestRestoreKubeadmRefuses(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	etcdYAML := func(cluster string) string {
		return `apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system, labels: {component: etcd, tier: control-plane}}
spec:
  containers:
  - name: etcd
    command: [etcd, --name=cp1, --data-dir=/var/lib/etcd, --advertise-client-urls=https://10.0.0.11:2379,
      --initial-advertise-peer-urls=https://10.0.0.11:2380, "--initial-cluster=` + cluster + `"]
    volumeMounts: [{name: etcd-data, mountPath: /var/lib/etcd}]
  volumes: [{name: etcd-data, hostPath: {path: /var/lib/etcd}}]
`
	}
	const apiYAML = `apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system, labels: {component: kube-apiserver, tier: control-plane}}
spec:
  containers:
  - name: kube-apiserver
    command: [kube-apiserver, --advertise-address=10.0.0.11, --client-ca-file=/etc/kubernetes/pki/ca.crt,
      --etcd-servers=https://127.0.0.1:2379, --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt,
      --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt, --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key]
`
	node := func(t *testing.T, cluster string) string {
		root := t.TempDir()
		dir := filepath.Join(root, "etc/kubernetes/manifests")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, data := range map[string]string{"etcd.yaml": etcdYAML(cluster), "kube-apiserver.yaml": apiYAML} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	single := "cp1=https://10.0.0.11:2380"
	defer func(old string, oldEUID func() int) { kubeadmRoot, euid = old, oldEUID }(kubeadmRoot, euid)
	for _, tc := range []struct {
		name    string
		root    func(t *testing.T) string
		uid     int
		args    []string
		wantErr string
	}{
		{name: "not root", root: func(t *testing.T) string { return node(t, single) }, uid: 1000, args: []string{"latest"}, wantErr: "run as root"},
		{name: "not a kubeadm node", root: func(t *testing.T) string { return t.TempDir() }, args: []string{"latest"}, wantErr: "not a kubeadm control-plane node"},
		{name: "another member running", root: func(t *testing.T) string {
			return node(t, single+",cp2=http://"+peer.Addr().String())
		}, args: []string{"latest"}, wantErr: "still running (cp2="},
		{name: "--initial-cluster without this node", root: func(t *testing.T) string { return node(t, single) },
			args: []string{"latest", "--initial-cluster", "cp2=https://192.0.2.254:1"}, wantErr: "does not name this node's member cp1"},
		{name: "--initial-cluster malformed", root: func(t *testing.T) string { return node(t, single) },
			args: []string{"latest", "--initial-cluster", "cp1"}, wantErr: `"cp1" is not name=peerURL`},
		{name: "rollback without a journal", root: func(t *testing.T) string { return node(t, single) }, args: []string{"--rollback"}, wantErr: "nothing to roll back"},
		{name: "rollback with a backup", root: func(t *testing.T) string { return node(t, single) }, args: []string{"latest", "--rollback"}, wantErr: "give no backup"},
		{name: "data dir given", root: func(t *testing.T) string { return node(t, single) }, args: []string{"latest", "--data-dir", "/x"}, wantErr: "give no --data-dir"},
		{name: "no backup", root: func(t *testing.T) string { return node(t, single) }, wantErr: "give a backup id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kubeadmRoot = tc.root(t)
			euid = func() int { return tc.uid }
			args := append([]string{"restore", "--kubeadm", "--store", "file://" + t.TempDir()}, tc.args...)
			code, out, errOut := runCLI(t, nil, args...)
			if code != exitUsage || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("exit %d, want %d with %q\nstdout:\n%s\nstderr:\n%s", code, exitUsage, tc.wantErr, out, errOut)
			}
			if _, err := os.Stat(filepath.Join(kubeadmRoot, "etc/kubernetes/lifeboat")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a refused restore made %s: %v", "etc/kubernetes/lifeboat", err)
			}
		})
	}
}
