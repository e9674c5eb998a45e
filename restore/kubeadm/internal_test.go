package kubeadm

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
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

// TestMembersAgree: when the members' HashKVs cannot be compared with
// the written file, they are compared with each other; a member that
// hashes differently at the same compact revision fails the restore.
func TestMembersAgree(t *testing.T) {
	for _, c := range []struct {
		name    string
		hashes  map[string]memberHash
		want    string
		wantErr string
	}{
		{"agree", map[string]memberHash{"a": {7, 10}, "b": {7, 10}, "c": {7, 10}}, "the 3 members agree with each other (0x00000007 at compact revision 10)", ""},
		{"disagree", map[string]memberHash{"a": {7, 10}, "b": {7, 10}, "c": {8, 10}}, "", "the members disagree at revision 20 (compact revision 10): a 0x00000007, c 0x00000008"},
		{"other compaction", map[string]memberHash{"a": {7, 10}, "b": {9, 20}}, "their compact revisions differ (a 10, b 20)", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := membersAgree(20, c.hashes)
			if c.wantErr != "" {
				if err == nil || !errors.Is(err, ErrCheck) || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("membersAgree = %q, %v; want ErrCheck with %q", got, err, c.wantErr)
				}
				return
			}
			if err != nil || !strings.Contains(got, c.want) {
				t.Fatalf("membersAgree = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}
