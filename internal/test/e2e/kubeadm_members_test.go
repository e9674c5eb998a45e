package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/kubeadmtest"
)

// extraMember is an etcd member beside the node's own, a plain etcd
// process in the node's network namespace at the node's address (other
// ports), standing in for the member of a second control-plane node.
type extraMember struct {
	name, client, peer string
	cert, key          string
	cmd                *exec.Cmd
	out                *syncbuf.Buffer
}

// start runs the member's etcd on dataDir; cluster and state are its
// --initial-cluster and --initial-cluster-state (ignored by etcd on a
// data dir that has its members).
func (m *extraMember) start(t *testing.T, ctx context.Context, n *kubeadmtest.Node, etcdBin, dataDir, cluster, state string) {
	t.Helper()
	ca := nodePKI + "etcd/ca.crt"
	m.out = &syncbuf.Buffer{Max: 1 << 20}
	m.cmd = n.Command(ctx, etcdBin, "--name", m.name, "--data-dir", dataDir,
		"--listen-client-urls", m.client, "--advertise-client-urls", m.client,
		"--listen-peer-urls", m.peer, "--initial-advertise-peer-urls", m.peer,
		"--initial-cluster", cluster, "--initial-cluster-state", state,
		"--cert-file", m.cert, "--key-file", m.key, "--client-cert-auth", "--trusted-ca-file", ca,
		"--peer-cert-file", m.cert, "--peer-key-file", m.key, "--peer-client-cert-auth", "--peer-trusted-ca-file", ca)
	m.cmd.Stdout, m.cmd.Stderr = m.out, m.out
	if err := m.cmd.Start(); err != nil {
		t.Fatalf("start etcd %s: %v", m.name, err)
	}
	t.Cleanup(m.stop)
}

func (m *extraMember) stop() {
	if m.cmd != nil && m.cmd.Process != nil {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		m.cmd = nil
	}
}

// othersLine is the command restore --kubeadm prints for another member.
var othersLine = regexp.MustCompile(`(?m)^  on (\S+): lifeboat restore --kubeadm (\S+) --initial-cluster (\S+) --initial-cluster-token (\S+) --bump-revision (\d+) --mark-compacted$`)

// restoreMembersOnNode is restore --kubeadm on a control plane of three:
// the node's etcd made one of three members (two more, extraMember, with
// certificates signed by the node's etcd CA); a backup; the two others
// stopped, which loses the majority; restore --kubeadm on the node
// restores its own member, prints the command for each other one and
// waits for them; the test restores each of them as printed (plain
// lifeboat restore, the same backup, members, token and bump) and starts
// their etcd; the restore on the node ends with the HashKV of all three
// members checked and the apiserver ready.
func restoreMembersOnNode(t *testing.T, ctx context.Context, n *kubeadmtest.Node, l *lifeboat, kubectl func(...string) string) {
	etcdBin := etcdtest.NeedBinary(t, "ETCD_BIN", "etcd")
	manifest, err := os.ReadFile(nodeManifests + "etcd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cli := nodeEtcd(t, n)
	cluster := nodeName(t, string(manifest)) + "=https://" + n.IP + ":2380"
	dir := t.TempDir()
	var others []*extraMember
	for i, name := range []string{"cp2", "cp3"} {
		m := &extraMember{name: name, client: fmt.Sprintf("https://%s:%d", n.IP, 12379+10000*i), peer: fmt.Sprintf("https://%s:%d", n.IP, 12380+10000*i)}
		m.cert, m.key = etcdtest.SignMember(t, nodePKI+"etcd/ca.crt", nodePKI+"etcd/ca.key", dir, name, net.ParseIP(n.IP))
		memberAdd(t, ctx, cli, m)
		cluster += "," + name + "=" + m.peer
		m.start(t, ctx, n, etcdBin, filepath.Join(dir, name+"-old"), cluster, "existing")
		waitMemberStarted(t, ctx, cli, name, m)
		others = append(others, m)
	}
	id, rev := l.snapshot(t, "https://"+n.IP+":2379")
	t.Logf("backup %s at revision %d of the cluster of three", id, rev)
	for _, m := range others {
		m.stop() // the node's etcd is left without a majority
	}

	out := &syncbuf.Buffer{Max: 4 << 20}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	restore := n.Command(rctx, l.bin, "restore", "--kubeadm", id, "--wait-members", "5m",
		"--store", l.store, "--spool-dir", l.spool, "--log-level", "error")
	restore.Env = cleanEnv()
	restore.Stdout, restore.Stderr = out, out
	start := time.Now()
	if err := restore.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- restore.Wait() }()
	var lines [][]string
	for deadline := time.Now().Add(5 * time.Minute); len(lines) < 2; time.Sleep(time.Second) {
		lines = othersLine.FindAllStringSubmatch(out.String(), -1)
		select {
		case err := <-done:
			t.Fatalf("restore --kubeadm ended before the others ran: %v\n%s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("restore --kubeadm printed no command for cp2 and cp3 in 5 min:\n%s", out.String())
		}
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "members not up yet: cp2="); time.Sleep(time.Second) {
		if time.Now().After(deadline) {
			t.Fatalf("restore --kubeadm does not say it waits for cp2 and cp3:\n%s", out.String())
		}
	}
	for i, m := range others {
		f := lines[i]
		if f[1] != m.name || f[2] != id || sortedList(f[3]) != sortedList(cluster) {
			t.Fatalf("command for %s: %q, want member %s, backup %s, cluster %s", m.name, f[0], m.name, id, cluster)
		}
		data := filepath.Join(dir, m.name)
		l.run(t, "restore", id, "--name", m.name, "--initial-cluster", f[3], "--initial-cluster-token", f[4],
			"--bump-revision", f[5], "--mark-compacted", "--data-dir", data)
		m.start(t, ctx, n, etcdBin, data, f[3], "new")
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restore --kubeadm of three members: %v\n%s\nthe members' keys:\n%s", err, out.String(), membersKeys(t, ctx, n, others, out.String()))
		}
	case <-rctx.Done():
		t.Fatalf("restore --kubeadm of three members did not end:\n%s", out.String())
	}
	t.Logf("restore --kubeadm of three members: %.1fs from the command (the others restored by the test after it printed their commands)\n%s", time.Since(start).Seconds(), out.String())
	for _, want := range []string{"a control plane of 3 members (read from the member list of the running etcd", "readyz ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("restore --kubeadm of three members printed no %q", want)
		}
	}
	// The file's HashKV is not comparable here (the compaction the
	// restore schedules has not finished): the members are compared with
	// each other.
	if !strings.Contains(out.String(), "match on all 3 members") && !strings.Contains(out.String(), "the 3 members agree with each other") {
		t.Errorf("restore --kubeadm of three members printed no HashKV verdict of all 3 members")
	}
	ml, err := nodeEtcd(t, n).MemberList(ctx)
	if err != nil || len(ml.Members) != 3 {
		t.Fatalf("member list after the restore: %v, %v; want 3 members", ml, err)
	}
	kubectl("get", "namespaces")
}

// waitMemberStarted waits until member name is started in the node's
// cluster (it has a name in the member list).
func waitMemberStarted(t *testing.T, ctx context.Context, cli *clientv3.Client, name string, m *extraMember) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(time.Second) {
		ml, err := cli.MemberList(ctx)
		if err == nil {
			for _, mm := range ml.Members {
				if mm.Name == name {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %s not started after 2 min (%v):\n%s", name, err, m.out.String())
		}
	}
}

// memberAdd adds m to the node's cluster. etcd refuses a member while
// one added before has not been connected for a few seconds ("unhealthy
// cluster"): it tries again for a minute.
func memberAdd(t *testing.T, ctx context.Context, cli *clientv3.Client, m *extraMember) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		_, err := cli.MemberAdd(ctx, []string{m.peer})
		if err == nil {
			return
		}
		if !strings.Contains(err.Error(), "unhealthy cluster") || time.Now().After(deadline) {
			t.Fatalf("member add %s: %v", m.name, err)
		}
	}
}

// sortedList is a comma-separated list, sorted.
func sortedList(s string) string {
	parts := strings.Split(s, ",")
	slices.Sort(parts)
	return strings.Join(parts, ",")
}

// membersKeys says, for a failed restore, how the members' keys differ at
// the written revision (from out: "[written] ... revision R").
func membersKeys(t *testing.T, ctx context.Context, n *kubeadmtest.Node, others []*extraMember, out string) string {
	m := regexp.MustCompile(`\[written\] .* revision (\d+),`).FindStringSubmatch(out)
	if m == nil {
		return "no written revision in the output"
	}
	var rev int64
	fmt.Sscan(m[1], &rev)
	eps := []string{"https://" + n.IP + ":2379"}
	for _, o := range others {
		eps = append(eps, o.client)
	}
	var b strings.Builder
	var first map[string]bool
	for i, ep := range eps {
		cli := nodeEtcdAt(t, ep)
		resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithKeysOnly(), clientv3.WithSerializable(), clientv3.WithRev(rev))
		if err != nil {
			fmt.Fprintf(&b, "%s: %v\n", ep, err)
			continue
		}
		now, _ := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly(), clientv3.WithSerializable())
		keys := map[string]bool{}
		for _, kv := range resp.Kvs {
			keys[string(kv.Key)] = true
		}
		fmt.Fprintf(&b, "%s: %d keys at revision %d; now revision %d, %d keys\n", ep, len(keys), rev, now.Header.Revision, now.Count)
		if i == 0 {
			first = keys
			continue
		}
		for k := range keys {
			if !first[k] {
				fmt.Fprintf(&b, "  only here, not on the node: %s\n", k)
			}
		}
		for k := range first {
			if !keys[k] {
				fmt.Fprintf(&b, "  only on the node: %s\n", k)
			}
		}
	}
	return b.String()
}
