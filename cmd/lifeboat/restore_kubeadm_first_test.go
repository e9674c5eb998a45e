package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// firstNodeEtcdYAML is etcd.yaml as kubeadm init writes it on the first
// control-plane node: its --initial-cluster names only itself, however
// many members join later (kubeadm join writes the longer list on the
// joining nodes only).
const firstNodeEtcdYAML = `apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system, labels: {component: etcd, tier: control-plane}}
spec:
  containers:
  - name: etcd
    command: [etcd, --name=NAME, --data-dir=/var/lib/etcd, --advertise-client-urls=CLIENT, --listen-client-urls=CLIENT,
      --initial-advertise-peer-urls=PEER, "--initial-cluster=NAME=PEER"]
    volumeMounts: [{name: etcd-data, mountPath: /var/lib/etcd}]
  volumes: [{name: etcd-data, hostPath: {path: /var/lib/etcd}}]
`

// TestRestoreKubeadmFirstNodeOfSeveral: on the first node of a kubeadm
// control plane of three (its etcd.yaml names only itself), restore
// --kubeadm takes the members from the cluster, not from etcd.yaml: while
// the two others run it refuses and names them; with all three stopped
// its plan restores three members, the others' commands printed with the
// whole cluster. (It took etcd.yaml's one member: a single-member restore
// of node 1, with the others still running on the old data.)
func TestRestoreKubeadmFirstNodeOfSeveral(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	m0 := c.Members[0]
	root := t.TempDir()
	yaml := strings.NewReplacer("NAME", m0.Name, "CLIENT", m0.ClientURL, "PEER", m0.PeerURL).Replace(firstNodeEtcdYAML)
	writeKubeadmManifests(t, root, "unused")
	if err := os.WriteFile(filepath.Join(root, "etc/kubernetes/manifests/etcd.yaml"), []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(m0.DataDir, filepath.Join(root, "var/lib/etcd")); err != nil {
		t.Fatal(err)
	}
	defer func(old string, oldEUID func() int) { kubeadmRoot, euid = old, oldEUID }(kubeadmRoot, euid)
	kubeadmRoot, euid = root, func() int { return 0 }
	dryRun := append([]string{"restore", "--kubeadm", "latest", "--dry-run"}, e.args...)

	code, out, errOut := runCLI(t, nil, dryRun...)
	if code != exitUsage {
		t.Fatalf("with two other members running: exit %d, want %d (refused)\nstdout:\n%s\nstderr:\n%s", code, exitUsage, out, errOut)
	}
	for _, m := range c.Members[1:] {
		if !strings.Contains(errOut, m.Name+"="+m.PeerURL) {
			t.Errorf("the refusal does not name running member %s=%s:\n%s", m.Name, m.PeerURL, errOut)
		}
	}

	for _, m := range c.Members {
		m.Stop()
	}
	code, out, errOut = runCLI(t, nil, dryRun...)
	if code != 0 {
		t.Fatalf("all members stopped: exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	cluster := m0.Name + "=" + m0.PeerURL + "," + c.Members[1].Name + "=" + c.Members[1].PeerURL + "," + c.Members[2].Name + "=" + c.Members[2].PeerURL
	for _, want := range []string{"3 members", "--initial-cluster " + cluster, "on " + c.Members[1].Name + ": lifeboat restore --kubeadm", "on " + c.Members[2].Name + ": lifeboat restore --kubeadm"} {
		if !strings.Contains(out, want) {
			t.Errorf("the plan lacks %q:\n%s", want, out)
		}
	}
}
