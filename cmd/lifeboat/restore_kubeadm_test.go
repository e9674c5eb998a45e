package main

import (
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
