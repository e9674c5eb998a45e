package kubeadmtest

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestNode brings the node up and runs a Job to completion on it (a pod
// scheduled, its sandbox and container started by containerd on the CNI
// bridge, its log read back through kubelet).
func TestNode(t *testing.T) {
	n := Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	img, err := n.Kubectl(ctx, "get", "pod", "-n", "kube-system", "-l", "component=etcd", "-o", "jsonpath={.items[0].spec.containers[0].image}")
	if err != nil {
		t.Fatal(err)
	}
	// The image is the node's own etcd image: tagged, so its pull policy
	// is IfNotPresent and it is never pulled.
	steps := []struct {
		name string
		args []string
	}{
		{"job", []string{"create", "job", "hello", "--image", img, "--", "etcd", "--version"}},
		{"job complete", []string{"wait", "--for=condition=Complete", "job/hello", "--timeout=180s"}},
	}
	for _, s := range steps {
		if out, err := n.Kubectl(ctx, s.args...); err != nil {
			t.Fatalf("%s: %v\n%s\n%s", s.name, err, out, n.Tails())
		}
	}
	logs, err := n.Kubectl(ctx, "logs", "job/hello")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := logs, "etcd Version:"; !strings.Contains(got, want) {
		t.Errorf("job log = %q, want it to contain %q", got, want)
	}
}
