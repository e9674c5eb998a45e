package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// kubeadmRoot is where restore looks for a kubeadm control-plane node's
// files (tests point it at a directory of their own).
var kubeadmRoot = "/"

// isKubeadmNode reports whether this host looks like a kubeadm
// control-plane node: /etc/kubernetes/manifests (the static pods) and
// /etc/kubernetes/pki/etcd (its etcd's CA) both exist.
func isKubeadmNode(root string) bool {
	for _, d := range []string{"etc/kubernetes/manifests", "etc/kubernetes/pki/etcd"} {
		if fi, err := os.Stat(filepath.Join(root, d)); err != nil || !fi.IsDir() {
			return false
		}
	}
	return true
}

// printKubeadmChecklist prints, on a kubeadm control-plane node, the steps
// around the restore (docs/restore.md, "kubeadm control plane"): static
// pods out and back, where the data dir goes, how the printed flags map
// onto etcd.yaml, and what to restart. It prints nothing elsewhere.
func printKubeadmChecklist(out io.Writer, root string, members []restore.RestoredMember, o restoreOptions) {
	if !isKubeadmNode(root) {
		return
	}
	manifests := filepath.Join(root, "etc/kubernetes/manifests")
	fmt.Fprintln(out, "\nkubeadm control-plane node (/etc/kubernetes/manifests): the rest of the procedure, on every control-plane node (docs/restore.md#kubeadm-control-plane):")
	var still []string
	for _, m := range []string{"etcd.yaml", "kube-apiserver.yaml"} {
		if _, err := os.Stat(filepath.Join(manifests, m)); err == nil {
			still = append(still, m)
		}
	}
	if len(still) > 0 {
		fmt.Fprintf(out, "  ! %s still in /etc/kubernetes/manifests: the old member may come back: move them out on every node first\n", strings.Join(still, " and "))
	}
	fmt.Fprintln(out, "  1. static pods out (done before the restore?): mv /etc/kubernetes/manifests/{etcd,kube-apiserver}.yaml /root/")
	fmt.Fprintln(out, "     and wait until `crictl ps --name 'etcd|kube-apiserver'` lists nothing")
	if !o.markCompacted || o.bumpRevision == 0 {
		fmt.Fprintln(out, "  ! this restore ran without --bump-revision 1000000000 --mark-compacted: Kubernetes' watchers would miss changes; restore again with them")
	}
	fmt.Fprintln(out, "  2. the data dir: restore into the path etcd.yaml's etcd-data hostPath names (kubeadm: /var/lib/etcd) with --force,")
	fmt.Fprintln(out, "     so etcd.yaml and kubeadm's ClusterConfiguration (etcd.local.dataDir) stay as they are")
	for _, m := range members {
		if m.DataDir != "/var/lib/etcd" {
			fmt.Fprintf(out, "     member %s was restored into %s: copy it to /var/lib/etcd on its node (or restore there)\n", m.Name, m.DataDir)
		}
	}
	fmt.Fprintln(out, "  3. etcd.yaml keeps its flags: --name is the node's name and --initial-advertise-peer-urls its https://IP:2380, the")
	fmt.Fprintln(out, "     values given to restore (--initial-cluster NODE=https://IP:2380,...); etcd starts from the restored data dir and")
	fmt.Fprintln(out, "     ignores --initial-cluster, --initial-cluster-token and --initial-cluster-state there")
	fmt.Fprintln(out, "  4. static pods back: mv /root/{etcd,kube-apiserver}.yaml /etc/kubernetes/manifests/ (etcd first, on every node)")
	fmt.Fprintln(out, "  5. restart so every component re-lists: systemctl restart kubelet; then")
	fmt.Fprintln(out, "     crictl stop $(crictl ps -q --name 'kube-controller-manager|kube-scheduler')")
	fmt.Fprintln(out, "     check: etcdctl endpoint health --cluster; kubectl get nodes")
}
