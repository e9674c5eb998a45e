package kubeadm

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// ErrNotKubeadm is wrapped when the root holds no kubeadm control plane:
// no static pod manifests of etcd and kube-apiserver as kubeadm writes them.
var ErrNotKubeadm = errors.New("not a kubeadm control-plane node")

// Paths of a kubeadm node, relative to its root.
const (
	ManifestsDir = "etc/kubernetes/manifests"
	// LifeboatDir holds the journal and, while etcd and the apiserver are
	// stopped, their manifests.
	LifeboatDir = "etc/kubernetes/lifeboat"
	EtcdYAML    = "etcd.yaml"
	APIYAML     = "kube-apiserver.yaml"
)

// Node is what a kubeadm control-plane node's static pods say about its
// etcd and apiserver. Paths are as the node sees them (a test root is not
// prefixed to the files the manifests name).
type Node struct {
	// Root is the directory the node's /etc and /var are under ("/").
	Root string
	// Name is etcd's --name.
	Name string
	// DataDir is the host path mounted at etcd's --data-dir (kubeadm:
	// /var/lib/etcd), under Root.
	DataDir string
	// PeerURLs are --initial-advertise-peer-urls, ClientURLs
	// --advertise-client-urls, ListenClientURLs --listen-client-urls.
	PeerURLs, ClientURLs, ListenClientURLs []string
	// InitialCluster is --initial-cluster.
	InitialCluster string
	// EtcdServers, EtcdCA, EtcdCert, EtcdKey: how the apiserver reaches
	// etcd (--etcd-servers, --etcd-cafile, --etcd-certfile,
	// --etcd-keyfile); the restore checks etcd the same way.
	EtcdServers               []string
	EtcdCA, EtcdCert, EtcdKey string
	// APIServer is the apiserver's https://address:port.
	APIServer string
	// APICA is the cluster CA (--client-ca-file) the apiserver's serving
	// certificate is signed by.
	APICA string
}

// Path returns p (a path as the node sees it) under Root.
func (n *Node) Path(p string) string { return filepath.Join(n.Root, p) }

// ReadNode reads the static pods of the kubeadm node under root (from
// where a restore moved them aside while it runs). It wraps
// ErrNotKubeadm when either manifest is missing or is not kubeadm's (a
// pod labelled component=etcd or component=kube-apiserver and
// tier=control-plane, with the flags kubeadm writes).
func ReadNode(root string) (*Node, error) {
	n := &Node{Root: root}
	etcd, err := readPod(root, EtcdYAML, "etcd")
	if err != nil {
		return nil, err
	}
	api, err := readPod(root, APIYAML, "kube-apiserver")
	if err != nil {
		return nil, err
	}
	f := flags(etcd.command)
	n.Name = f["name"]
	dataDir := f["data-dir"]
	n.PeerURLs = list(f["initial-advertise-peer-urls"])
	n.ClientURLs = list(f["advertise-client-urls"])
	n.ListenClientURLs = list(f["listen-client-urls"])
	n.InitialCluster = f["initial-cluster"]
	for _, v := range []struct{ flag, val string }{
		{"--name", n.Name}, {"--data-dir", dataDir}, {"--initial-advertise-peer-urls", f["initial-advertise-peer-urls"]},
		{"--advertise-client-urls", f["advertise-client-urls"]}, {"--initial-cluster", n.InitialCluster},
	} {
		if v.val == "" {
			return nil, fmt.Errorf("%s: %w: etcd has no %s", etcd.file, ErrNotKubeadm, v.flag)
		}
	}
	host, ok := etcd.hostPath(dataDir)
	if !ok {
		return nil, fmt.Errorf("%s: %w: no hostPath volume is mounted at etcd's --data-dir %s", etcd.file, ErrNotKubeadm, dataDir)
	}
	n.DataDir = filepath.Join(root, host)
	a := flags(api.command)
	n.EtcdServers = list(a["etcd-servers"])
	n.EtcdCA, n.EtcdCert, n.EtcdKey = a["etcd-cafile"], a["etcd-certfile"], a["etcd-keyfile"]
	n.APICA = a["client-ca-file"]
	addr, port := a["advertise-address"], a["secure-port"]
	if port == "" {
		port = "6443"
	}
	for _, v := range []struct{ flag, val string }{
		{"--etcd-servers", a["etcd-servers"]}, {"--etcd-cafile", n.EtcdCA}, {"--etcd-certfile", n.EtcdCert},
		{"--etcd-keyfile", n.EtcdKey}, {"--advertise-address", addr}, {"--client-ca-file", n.APICA},
	} {
		if v.val == "" {
			return nil, fmt.Errorf("%s: %w: kube-apiserver has no %s", api.file, ErrNotKubeadm, v.flag)
		}
	}
	n.APIServer = "https://" + net.JoinHostPort(addr, port)
	return n, nil
}

// staticPod is one parsed manifest.
type staticPod struct {
	file    string
	pod     corev1.Pod
	command []string
}

// hostPath returns the host path of the hostPath volume mounted at dir
// in the pod's first container (or at a parent of dir).
func (s *staticPod) hostPath(dir string) (string, bool) {
	c := s.pod.Spec.Containers[0]
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, dir)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range s.pod.Spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil {
				return filepath.Join(v.HostPath.Path, rel), true
			}
		}
	}
	return "", false
}

// readPod reads the static pod name from the manifests directory or,
// while a restore has it moved aside, from LifeboatDir/manifests.
func readPod(root, name, component string) (*staticPod, error) {
	file := filepath.Join(root, ManifestsDir, name)
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		aside := filepath.Join(root, LifeboatDir, "manifests", name)
		if d, err2 := os.ReadFile(aside); err2 == nil {
			file, data, err = aside, d, nil
		}
	}
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w: no such file (is etcd already stopped by hand? put it back, or restore with lifeboat restore --data-dir)", file, ErrNotKubeadm)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	s := &staticPod{file: file}
	if err := yaml.Unmarshal(data, &s.pod); err != nil {
		return nil, fmt.Errorf("%s: %w: not a pod manifest: %v", file, ErrNotKubeadm, err)
	}
	l := s.pod.Labels
	if s.pod.Kind != "Pod" || l["component"] != component || l["tier"] != "control-plane" || len(s.pod.Spec.Containers) == 0 {
		return nil, fmt.Errorf("%s: %w: want a Pod labelled component=%s, tier=control-plane (kubeadm's static pod)", file, ErrNotKubeadm, component)
	}
	c := s.pod.Spec.Containers[0]
	s.command = append(append([]string{}, c.Command...), c.Args...)
	return s, nil
}

// flags reads --key=value (and --key value) arguments.
func flags(args []string) map[string]string {
	out := map[string]string{}
	for i := 0; i < len(args); i++ {
		a, ok := strings.CutPrefix(args[i], "--")
		if !ok {
			continue
		}
		if k, v, ok := strings.Cut(a, "="); ok {
			out[k] = v
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[a] = args[i+1]
			i++
			continue
		}
		out[a] = "true"
	}
	return out
}

// list splits a comma-separated flag value.
func list(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// hostPort returns a URL's host:port (the scheme's port when it has none).
func hostPort(u string) (string, error) {
	pu, err := url.Parse(u)
	if err != nil || pu.Host == "" {
		return "", fmt.Errorf("%q is not a URL", u)
	}
	if pu.Port() != "" {
		return pu.Host, nil
	}
	port := "80"
	if pu.Scheme == "https" {
		port = "443"
	}
	return net.JoinHostPort(pu.Hostname(), port), nil
}
