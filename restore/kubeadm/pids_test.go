package kubeadm

import (
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestAPIServerPIDs: the restore kills this node's kube-apiserver once
// etcd is gone, and only it: a process named kube-apiserver with the
// node's advertise address and etcd servers, not another apiserver on the
// same machine (another node of a test, a second cluster).
func TestAPIServerPIDs(t *testing.T) {
	n := &Node{APIServer: "https://127.0.0.1:6443", EtcdServers: []string{"https://127.0.0.1:2379"}}
	start := func(args ...string) *exec.Cmd {
		// sh with argv[0] kube-apiserver: /proc/PID/cmdline names it so.
		cmd := &exec.Cmd{Path: "/bin/sh", Args: append([]string{"kube-apiserver", "-c", "while :; do sleep 1; done"}, args...)}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	ours := start("--advertise-address=127.0.0.1", "--etcd-servers=https://127.0.0.1:2379", "--secure-port=6443")
	other := start("--advertise-address=127.0.0.1", "--etcd-servers=https://127.0.0.1:12379")
	var pids []int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var err error
		if pids, err = apiServerPIDs(n); err != nil {
			t.Fatal(err)
		}
		if len(pids) > 0 {
			break
		}
	}
	if !slices.Equal(pids, []int{ours.Process.Pid}) {
		t.Fatalf("apiServerPIDs = %v, want [%d] (not the other apiserver's %d)", pids, ours.Process.Pid, other.Process.Pid)
	}
}
