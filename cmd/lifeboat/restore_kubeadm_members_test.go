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
// 3-member control plane whose other members are stopped moves nothing
// (exit 2: the in-place restore is for one member) and prints the exact
// restore command of every member: the backup's id (latest resolved now),
// the same token and bump, each its own --name, into etcd.yaml's data dir.
// Each printed command, run with the data dir pointed at a directory of
// the test, restores its member.
func TestRestoreKubeadmMembersPlan(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	cp2, cp3 := closedPort(t), closedPort(t)
	cluster := "cp1=https://10.0.0.11:2380,cp2=https://" + cp2 + ",cp3=https://" + cp3
	root := t.TempDir()
	writeKubeadmManifests(t, root, cluster)
	defer func(old string, oldEUID func() int) { kubeadmRoot, euid = old, oldEUID }(kubeadmRoot, euid)
	kubeadmRoot, euid = root, func() int { return 0 }
	membersPlanChecks(t, e, root, cluster)
}

// writeKubeadmManifests writes etcd.yaml (member cp1 of cluster) and
// kube-apiserver.yaml below root as kubeadm does.
func writeKubeadmManifests(t *testing.T, root, cluster string) {
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
    command: [etcd, --name=cp1, --data-dir=/var/lib/etcd, --advertise-client-urls=https://10.0.0.11:2379,
      --initial-advertise-peer-urls=https://10.0.0.11:2380, "--initial-cluster=` + cluster + `"]
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

// membersPlanChecks runs restore --kubeadm latest on root and checks
// the plan it prints, then runs each printed command.
func membersPlanChecks(t *testing.T, e *drillEnv, root, cluster string) {
	t.Helper()
	code, out, errOut := runCLI(t, nil, append([]string{"restore", "--kubeadm", "latest"}, e.args...)...)
	if code != exitUsage || !strings.Contains(errOut, "restores single-member control planes") {
		t.Fatalf("exit %d, want %d and the refusal\nstdout:\n%s\nstderr:\n%s", code, exitUsage, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(root, "etc/kubernetes/lifeboat")); err == nil {
		t.Errorf("a refused restore made etc/kubernetes/lifeboat")
	}
	id := regexp.MustCompile(`from backup (\S+) \(`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("no backup id in the plan:\n%s", out)
	}
	tail := " --initial-cluster " + cluster + " --initial-cluster-token lifeboat-" + id[1] + " --bump-revision 1000000000 --mark-compacted"
	var cmds []string
	for _, name := range []string{"cp1", "cp2", "cp3"} {
		want := "     on " + name + ": lifeboat restore " + id[1] + " --data-dir /var/lib/etcd --force --name " + name + tail
		if !strings.Contains(out, want+"\n") {
			t.Errorf("the plan lacks the line\n%s\nin:\n%s", want, out)
		}
		cmds = append(cmds, strings.TrimPrefix(want, "     on "+name+": lifeboat "))
	}
	if t.Failed() {
		return
	}
	// Each printed command restores its member (the data dir pointed at the
	// test's: the same flags otherwise).
	kubeadmRoot = t.TempDir() // not a kubeadm node: no checklist
	for i, c := range cmds {
		dataDir := filepath.Join(t.TempDir(), "etcd")
		args := strings.Fields(strings.Replace(c, "--data-dir /var/lib/etcd", "--data-dir "+dataDir, 1))
		code, out, errOut := runCLI(t, nil, append(args, e.args...)...)
		if code != 0 {
			t.Fatalf("member %d: lifeboat %s: exit %d\n%s\n%s", i+1, c, code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(dataDir, "member", "snap", "db")); err != nil {
			t.Errorf("member %d: %v", i+1, err)
		}
	}
}
