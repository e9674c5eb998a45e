package main

import (
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// closedPort returns a loopback host:port nothing listens on (a stopped
// member: its peer port refuses at once).
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRestoreKubeadmMembersPlan: restore --kubeadm on a node of a
// 3-member control plane whose other members are stopped plans the
// restore of its own member into the cluster of three (--dry-run here)
// and prints the command for each other node: the backup's id (latest
// resolved now), the members, the same token and bump. The printed
// command, run on the node of cp2 (its etcd.yaml names cp2), plans cp2's
// member of the same cluster.
func TestRestoreKubeadmMembersPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	cp1, cp2, cp3 := closedPort(t), closedPort(t), closedPort(t)
	cluster := "cp1=https://" + cp1 + ",cp2=https://" + cp2 + ",cp3=https://" + cp3
	root := t.TempDir()
	writeKubeadmManifestsAs(t, root, "cp1", "https://"+cp1, cluster)
	defer func(old string, oldEUID func() int) { kubeadmRoot, euid = old, oldEUID }(kubeadmRoot, euid)
	kubeadmRoot, euid = root, func() int { return 0 }
	code, out, errOut := runCLI(t, nil, append([]string{"restore", "--kubeadm", "latest", "--dry-run"}, e.args...)...)
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	id := regexp.MustCompile(`(?m)^backup (\S+): revision`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no backup id in the plan:\n%s", out)
	}
	cmd := "lifeboat restore --kubeadm " + id[1] + " --initial-cluster " + cluster + " --initial-cluster-token lifeboat-" + id[1] + " --bump-revision 1000000000 --mark-compacted"
	for _, want := range []string{"a control plane of 3 members (read from etcd.yaml's --initial-cluster", "  on cp2: " + cmd + "\n", "  on cp3: " + cmd + "\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
	if t.Failed() {
		return
	}
	// The printed command on cp2's node.
	kubeadmRoot = t.TempDir()
	writeKubeadmManifestsAs(t, kubeadmRoot, "cp2", "https://"+cp2, "cp2=https://"+cp2)
	args := append(strings.Fields(strings.TrimPrefix(cmd, "lifeboat ")), "--dry-run")
	code, out, errOut = runCLI(t, nil, append(args, e.args...)...)
	if code != 0 {
		t.Fatalf("on cp2: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{"member cp2,", "a control plane of 3 members (read from --initial-cluster): " + cluster, "  on cp1: " + cmd + "\n",
		"restore backup " + id[1] + " into"} {
		if !strings.Contains(out, want) {
			t.Errorf("cp2's plan lacks %q:\n%s", want, out)
		}
	}
}

// writeKubeadmManifests writes etcd.yaml (member cp1 of cluster) and
// kube-apiserver.yaml below root as kubeadm does.
func writeKubeadmManifests(t *testing.T, root, cluster string) {
	t.Helper()
	writeKubeadmManifestsAs(t, root, "cp1", "https://10.0.0.11:2380", cluster)
}

// writeKubeadmManifestsAs writes etcd.yaml (member name at peer, of
// cluster) and kube-apiserver.yaml below root as kubeadm does.
func writeKubeadmManifestsAs(t *testing.T, root, name, peer, cluster string) {
	t.Helper()
	dir := filepath.Join(root, "etc/kubernetes/manifests")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	etcdYAML := `apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system, labels: {component: etcd, tier: control-plane}}
spec:
  containers:
  - name: etcd
    command: [etcd, --name=` + name + `, --data-dir=/var/lib/etcd, --advertise-client-urls=https://10.0.0.11:2379,
      --initial-advertise-peer-urls=` + peer + `, "--initial-cluster=` + cluster + `"]
    volumeMounts: [{name: etcd-data, mountPath: /var/lib/etcd}]
  volumes: [{name: etcd-data, hostPath: {path: /var/lib/etcd}}]
`
	apiYAML := `apiVersion: v1
kind: Pod
metadata: {name: kube-apiserver, namespace: kube-system, labels: {component: kube-apiserver, tier: control-plane}}
spec:
  containers:
  - name: kube-apiserver
    command: [kube-apiserver, --advertise-address=10.0.0.11, --client-ca-file=/etc/kubernetes/pki/ca.crt,
      --etcd-servers=https://127.0.0.1:2379, --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt,
      --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt, --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key]
`
	for name, data := range map[string]string{"etcd.yaml": etcdYAML, "kube-apiserver.yaml": apiYAML} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
