package kubeadm_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/kubeadm"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// fakeNode is a kubeadm node's files under a temporary root, with a
// stand-in for kubelet: while etcd.yaml is in the manifests directory a
// real etcd (embedded) runs on the node's data dir with the manifest's
// name and URLs, and while kube-apiserver.yaml is there an HTTPS server
// answers /readyz (signed by the node's CA file). Everything else the
// restore touches (renames, the journal, etcd's database lock, ports,
// health, revision, keys, HashKV) is real.
type fakeNode struct {
	name                  string // etcd's --name (node1)
	root                  string
	client, peer, apiAddr string
	snapshot              string // a snapshot taken when the node held "before" keys
	// member of several: kubelet starts etcd without waiting for it to
	// be ready (it is once a majority of the members run).
	member bool

	mu       sync.Mutex
	etcd     *embed.Etcd
	starts   int // how many times etcd was started
	api      *httptest.Server
	stopLoop context.CancelFunc
	loopDone chan struct{}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

const etcdManifest = `apiVersion: v1
kind: Pod
metadata:
  name: etcd
  namespace: kube-system
  labels: {component: etcd, tier: control-plane}
spec:
  hostNetwork: true
  containers:
  - name: etcd
    image: lifeboat.local/etcd:v3.7.3
    command:
    - etcd
    - --name=node1
    - --data-dir=/var/lib/etcd
    - --advertise-client-urls=http://CLIENT
    - --listen-client-urls=http://CLIENT
    - --initial-advertise-peer-urls=http://PEER
    - --listen-peer-urls=http://PEER
    - --initial-cluster=node1=http://PEER
    volumeMounts:
    - {name: etcd-data, mountPath: /var/lib/etcd}
  volumes:
  - name: etcd-data
    hostPath: {path: /var/lib/etcd, type: DirectoryOrCreate}
`

const apiManifest = `apiVersion: v1
kind: Pod
metadata:
  name: kube-apiserver
  namespace: kube-system
  labels: {component: kube-apiserver, tier: control-plane}
spec:
  containers:
  - name: kube-apiserver
    image: lifeboat.local/kube-apiserver:v1.37.2
    command:
    - kube-apiserver
    - --advertise-address=127.0.0.1
    - --secure-port=APIPORT
    - --client-ca-file=/etc/kubernetes/pki/ca.crt
    - --etcd-servers=http://CLIENT
    - --etcd-cafile=/etc/kubernetes/pki/etcd/ca.crt
    - --etcd-certfile=/etc/kubernetes/pki/apiserver-etcd-client.crt
    - --etcd-keyfile=/etc/kubernetes/pki/apiserver-etcd-client.key
`

// newFakeNode writes the node, starts its etcd and apiserver, writes the
// "before" keys, takes the snapshot, then the "after" keys (the state a
// restore goes back from).
func newFakeNode(t *testing.T) *fakeNode { return newFakeNodeNamed(t, "node1") }

// newFakeNodeNamed is newFakeNode with etcd's --name name.
func newFakeNodeNamed(t *testing.T, name string) *fakeNode {
	t.Helper()
	f := &fakeNode{name: name, root: t.TempDir(), client: freePort(t), peer: freePort(t), apiAddr: freePort(t)}
	_, apiPort, _ := net.SplitHostPort(f.apiAddr)
	r := strings.NewReplacer("CLIENT", f.client, "PEER", f.peer, "APIPORT", apiPort, "node1", name)
	f.writeFile(t, kubeadm.ManifestsDir+"/"+kubeadm.EtcdYAML, r.Replace(etcdManifest))
	f.writeFile(t, kubeadm.ManifestsDir+"/"+kubeadm.APIYAML, r.Replace(apiManifest))
	// httptest's servers share one certificate: the node's CA file
	api := httptest.NewTLSServer(http.NotFoundHandler())
	f.writeFile(t, "etc/kubernetes/pki/ca.crt", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})))
	api.Close()
	ctx, cancel := context.WithCancel(context.Background())
	f.stopLoop, f.loopDone = cancel, make(chan struct{})
	go f.kubelet(t, ctx)
	t.Cleanup(func() {
		f.stopLoop()
		<-f.loopDone
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.etcd != nil {
			f.etcd.Close()
		}
		if f.api != nil {
			f.api.Close()
		}
	})
	f.waitEtcd(t)
	f.put(t, "/registry/namespaces/before", "/registry/configmaps/before/a", "/registry/configmaps/before/b")
	f.snapshot = filepath.Join(t.TempDir(), "snap.db")
	cli := f.cli(t)
	rc, err := cli.Snapshot(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := io.Copy(&b, rc); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if err := os.WriteFile(f.snapshot, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(t.Context(), "/registry/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	f.put(t, "/registry/namespaces/after")
	return f
}

func (f *fakeNode) writeFile(t *testing.T, rel, data string) {
	t.Helper()
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// kubelet runs the static pods the manifests directory holds.
func (f *fakeNode) kubelet(t *testing.T, ctx context.Context) {
	defer close(f.loopDone)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		_, errE := os.Stat(filepath.Join(f.root, kubeadm.ManifestsDir, kubeadm.EtcdYAML))
		_, errA := os.Stat(filepath.Join(f.root, kubeadm.ManifestsDir, kubeadm.APIYAML))
		f.mu.Lock()
		switch {
		case errE == nil && f.etcd == nil:
			e, err := f.startEtcd()
			if err != nil {
				t.Errorf("kubelet: start etcd: %v", err)
			}
			f.etcd = e
			f.starts++
		case errE != nil && f.etcd != nil:
			f.etcd.Close()
			f.etcd = nil
		}
		switch {
		case errA == nil && f.api == nil:
			s, err := f.startAPI()
			if err != nil {
				t.Errorf("kubelet: start the apiserver: %v", err)
			}
			f.api = s
		case errA != nil && f.api != nil:
			f.api.Close()
			f.api = nil
		}
		f.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// startAPI serves /readyz at the apiserver's address.
func (f *fakeNode) startAPI() (*httptest.Server, error) {
	l, err := net.Listen("tcp", f.apiAddr)
	if err != nil {
		return nil, err
	}
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == "/readyz" {
			io.WriteString(w, "ok")
			return
		}
		http.NotFound(w, req)
	}))
	s.Listener.Close()
	s.Listener = l
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // the restore's port probes close without a handshake
	s.StartTLS()
	return s, nil
}

func (f *fakeNode) startEtcd() (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = f.name
	cfg.Dir = filepath.Join(f.root, "var/lib/etcd")
	cu, _ := url.Parse("http://" + f.client)
	pu, _ := url.Parse("http://" + f.peer)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = f.name + "=" + pu.String() // a restored data dir has its members: etcd ignores this
	cfg.Logger, cfg.LogLevel = "zap", "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	if f.member {
		return e, nil
	}
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, errors.New("not ready after 30s")
	}
	return e, nil
}

func (f *fakeNode) waitEtcd(t *testing.T) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		f.mu.Lock()
		up := f.etcd != nil
		f.mu.Unlock()
		if up {
			return
		}
	}
	t.Fatal("fake kubelet started no etcd in 30s")
}

func (f *fakeNode) cli(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + f.client}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func (f *fakeNode) put(t *testing.T, keys ...string) {
	t.Helper()
	cli := f.cli(t)
	for _, k := range keys {
		if _, err := cli.Put(t.Context(), k, "v"); err != nil {
			t.Fatal(err)
		}
	}
}

// keys lists the keys under /registry/ of the running etcd.
func (f *fakeNode) keys(t *testing.T) string {
	t.Helper()
	resp, err := f.cli(t).Get(t.Context(), "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var ks []string
	for _, kv := range resp.Kvs {
		ks = append(ks, string(kv.Key))
	}
	return strings.Join(ks, " ")
}

// write is Options.Write: the snapshot restored as lifeboat restore does.
func (f *fakeNode) write(ctx context.Context, j *kubeadm.Journal) (kubeadm.Written, error) {
	st, err := verify.File(ctx, f.snapshot)
	if err != nil {
		return kubeadm.Written{}, err
	}
	j.RevisionBump = j.Bump(st.Revision)
	_, err = restore.Restore(ctx, restore.RestoreOptions{
		SnapshotPath: f.snapshot, DataDir: j.NewDataDir, Name: j.Name, InitialCluster: j.InitialCluster,
		InitialClusterToken: j.Token, RevisionBump: j.RevisionBump, MarkCompacted: j.MarkCompacted,
	})
	return kubeadm.Written{Revision: st.Revision, TotalKeys: st.TotalKeys}, err
}

func (f *fakeNode) options(out io.Writer) kubeadm.Options {
	return kubeadm.Options{Out: out, Write: f.write, Poll: 20 * time.Millisecond, StopTimeout: 30 * time.Second, StartTimeout: 60 * time.Second}
}

const (
	before = "/registry/configmaps/before/a /registry/configmaps/before/b /registry/namespaces/before"
	after  = "/registry/namespaces/after"
)

var errCrash = errors.New("crashed on purpose")

func plan(t *testing.T, f *fakeNode, now time.Time) (*kubeadm.Node, *kubeadm.Journal) {
	t.Helper()
	n, err := kubeadm.ReadNode(f.root)
	if err != nil {
		t.Fatal(err)
	}
	return n, kubeadm.NewJournal(n, kubeadm.Source{Backup: "b1"}, 1_000_000_000, true, "lifeboat-b1", now)
}

// TestRun restores, crashing after each phase in turn (and half-way
// through the swap) and running again from the journal: every run ends
// with the snapshot's keys served, the old data dir kept with the keys
// written after the snapshot, both manifests back, the journal done.
func TestRun(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	for _, tc := range []struct {
		name    string
		crashAt kubeadm.Phase // "" runs through
		between func(t *testing.T, j *kubeadm.Journal)
	}{
		{name: "through"},
		{name: "crash after aside", crashAt: kubeadm.PhaseAside},
		{name: "crash after stopped", crashAt: kubeadm.PhaseStopped},
		{name: "crash after written", crashAt: kubeadm.PhaseWritten},
		{name: "crash after written, old dir already moved", crashAt: kubeadm.PhaseWritten, between: func(t *testing.T, j *kubeadm.Journal) {
			if err := os.Rename(j.DataDir, j.OldDataDir); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "crash after stopped, half-written new dir", crashAt: kubeadm.PhaseStopped, between: func(t *testing.T, j *kubeadm.Journal) {
			if err := os.MkdirAll(filepath.Join(j.NewDataDir, "member", "snap"), 0o700); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "crash after swapped", crashAt: kubeadm.PhaseSwapped},
		{name: "crash after etcd", crashAt: kubeadm.PhaseEtcd},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(t)
			n, j := plan(t, f, time.Date(2026, 12, 4, 8, 0, 0, 0, time.UTC))
			var out bytes.Buffer
			o := f.options(&out)
			if tc.crashAt != "" {
				o.AfterPhase = func(p kubeadm.Phase) error {
					if p == tc.crashAt {
						return errCrash
					}
					return nil
				}
				if _, err := kubeadm.Run(t.Context(), n, j, o); !errors.Is(err, errCrash) {
					t.Fatalf("Run until %s: %v, want the crash\n%s", tc.crashAt, err, out.String())
				}
				if tc.between != nil {
					tc.between(t, j)
				}
				// a new process: the node read again (its manifests may
				// be aside), the journal loaded
				var err error
				if n, err = kubeadm.ReadNode(f.root); err != nil {
					t.Fatalf("ReadNode after the crash: %v", err)
				}
				if j, err = kubeadm.LoadJournal(f.root); err != nil || j == nil {
					t.Fatalf("LoadJournal after the crash: %v, %v", j, err)
				}
				if got, want := j.Phase, tc.crashAt; got != want {
					t.Fatalf("journal phase after the crash = %s, want %s", got, want)
				}
				o.AfterPhase = nil
			}
			res, err := kubeadm.Run(t.Context(), n, j, o)
			if err != nil {
				t.Fatalf("Run: %v\n%s", err, out.String())
			}
			if got, want := f.keys(t), before; got != want {
				t.Errorf("keys after the restore = %q, want %q", got, want)
			}
			// the run that started etcd checked it (not the rerun after a
			// crash past that phase)
			if got, want := strings.Join(res.Checks, "; "), "hashkv"; tc.crashAt != kubeadm.PhaseEtcd && !strings.Contains(got, want) {
				t.Errorf("checks = %q, want them to name %q", got, want)
			}
			checkDone(t, f, j)
		})
	}
}

func checkDone(t *testing.T, f *fakeNode, j *kubeadm.Journal) {
	t.Helper()
	for _, m := range []string{kubeadm.EtcdYAML, kubeadm.APIYAML} {
		if _, err := os.Stat(filepath.Join(f.root, kubeadm.ManifestsDir, m)); err != nil {
			t.Errorf("%s not back: %v", m, err)
		}
	}
	if _, err := os.Stat(filepath.Join(j.OldDataDir, "member", "snap", "db")); err != nil {
		t.Errorf("old data dir not kept: %v", err)
	}
	if _, err := os.Stat(j.NewDataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("new data dir still beside the data dir: %v", err)
	}
	got, err := kubeadm.LoadJournal(f.root)
	if err != nil || got == nil || got.Phase != kubeadm.PhaseDone {
		t.Errorf("journal after the restore: %+v, %v; want phase done", got, err)
	}
}

// TestRollback restores (or crashes in the middle) and rolls back: the
// keys written after the snapshot are served again, the restored data
// dir is kept, the journal says rolled back.
func TestRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	for _, tc := range []struct {
		name         string
		crashAt      kubeadm.Phase
		restoredKept bool
	}{
		{name: "after a restore", restoredKept: true},
		{name: "crashed after written", crashAt: kubeadm.PhaseWritten},
		{name: "crashed after swapped", crashAt: kubeadm.PhaseSwapped, restoredKept: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeNode(t)
			n, j := plan(t, f, time.Now())
			var out bytes.Buffer
			o := f.options(&out)
			o.AfterPhase = func(p kubeadm.Phase) error {
				if p == tc.crashAt {
					return errCrash
				}
				return nil
			}
			if _, err := kubeadm.Run(t.Context(), n, j, o); err != nil && !errors.Is(err, errCrash) {
				t.Fatalf("Run: %v\n%s", err, out.String())
			}
			j, err := kubeadm.LoadJournal(f.root)
			if err != nil {
				t.Fatal(err)
			}
			if err := kubeadm.Rollback(t.Context(), n, j, f.options(&out)); err != nil {
				t.Fatalf("Rollback: %v\n%s", err, out.String())
			}
			if got, want := f.keys(t), after; got != want {
				t.Errorf("keys after the rollback = %q, want %q", got, want)
			}
			_, err = os.Stat(filepath.Join(j.RestoredDataDir, "member", "snap", "db"))
			if got := err == nil; got != tc.restoredKept {
				t.Errorf("restored data dir %q kept: %v, want %v", j.RestoredDataDir, got, tc.restoredKept)
			}
			j, err = kubeadm.LoadJournal(f.root)
			if err != nil || j.Phase != kubeadm.PhaseRolledBack {
				t.Errorf("journal after the rollback: %+v, %v", j, err)
			}
		})
	}
}

// TestRestoreTwice restores twice with a small bump: the second restore
// of the same, older snapshot raises its bump so that its revision is above
// the first one's (clients that saw the first would wait for it).
func TestRestoreTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := newFakeNode(t)
	var revs []int64
	for i := range 2 {
		n, err := kubeadm.ReadNode(f.root)
		if err != nil {
			t.Fatal(err)
		}
		if j, err := kubeadm.LoadJournal(f.root); err != nil || (j != nil && func() error { _, err := j.Archive(); return err }() != nil) {
			t.Fatalf("journal: %v", err)
		}
		j := kubeadm.NewJournal(n, kubeadm.Source{Backup: "b1"}, 1000, true, "t", time.Date(2026, 12, 4, 8, 0, i, 0, time.UTC))
		var out bytes.Buffer
		if _, err := kubeadm.Run(t.Context(), n, j, f.options(&out)); err != nil {
			t.Fatalf("restore %d: %v\n%s", i+1, err, out.String())
		}
		revs = append(revs, j.Expected.Revision)
		f.put(t, "/registry/namespaces/between") // a write after the restore
	}
	if revs[1] <= revs[0]+1 {
		t.Errorf("revisions of two restores of one snapshot with --bump-revision 1000: %v, want the second above the first's and its write", revs)
	}
}

// TestReadNode reads kubeadm's manifests and refuses what is not one.
func TestReadNode(t *testing.T) {
	r := strings.NewReplacer("CLIENT", "10.0.0.2:2379", "PEER", "10.0.0.2:2380", "APIPORT", "6443")
	good := map[string]string{kubeadm.EtcdYAML: r.Replace(etcdManifest), kubeadm.APIYAML: r.Replace(apiManifest)}
	for _, tc := range []struct {
		name  string
		edit  func(files map[string]string)
		want  error
		check func(t *testing.T, n *kubeadm.Node)
	}{
		{name: "kubeadm", check: func(t *testing.T, n *kubeadm.Node) {
			got := fmt.Sprintf("%s %s %v %v %s %s", n.Name, strings.TrimPrefix(n.DataDir, n.Root), n.ClientURLs, n.PeerURLs, n.InitialCluster, n.APIServer)
			want := "node1 /var/lib/etcd [http://10.0.0.2:2379] [http://10.0.0.2:2380] node1=http://10.0.0.2:2380 https://127.0.0.1:6443"
			if got != want {
				t.Errorf("node = %q, want %q", got, want)
			}
		}},
		{name: "no etcd.yaml", edit: func(f map[string]string) { delete(f, kubeadm.EtcdYAML) }, want: kubeadm.ErrNotKubeadm},
		{name: "no kube-apiserver.yaml", edit: func(f map[string]string) { delete(f, kubeadm.APIYAML) }, want: kubeadm.ErrNotKubeadm},
		{name: "not a static pod of kubeadm", edit: func(f map[string]string) {
			f[kubeadm.EtcdYAML] = strings.Replace(f[kubeadm.EtcdYAML], "tier: control-plane", "tier: other", 1)
		}, want: kubeadm.ErrNotKubeadm},
		{name: "data dir not a hostPath", edit: func(f map[string]string) {
			f[kubeadm.EtcdYAML] = strings.Replace(f[kubeadm.EtcdYAML], "mountPath: /var/lib/etcd", "mountPath: /data", 1)
		}, want: kubeadm.ErrNotKubeadm},
		{name: "not YAML of a pod", edit: func(f map[string]string) { f[kubeadm.APIYAML] = "[" }, want: kubeadm.ErrNotKubeadm},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]string{}
			for k, v := range good {
				files[k] = v
			}
			if tc.edit != nil {
				tc.edit(files)
			}
			root := t.TempDir()
			dir := filepath.Join(root, kubeadm.ManifestsDir)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			for k, v := range files {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(v), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			n, err := kubeadm.ReadNode(root)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("ReadNode: %v, want %v", err, tc.want)
			}
			if tc.check != nil {
				tc.check(t, n)
			}
		})
	}
}

// TestRunMembers: three nodes of one control plane, each restoring its own
// member of the same cluster from the same snapshot. The first waits,
// saying which members are not up, until the others run; then all three
// serve the snapshot's keys as one cluster of three members, each checked
// (HashKV of every member at the written revision), and each apiserver is
// back.
func TestRunMembers(t *testing.T) {
	nodes := []*fakeNode{newFakeNodeNamed(t, "a"), newFakeNodeNamed(t, "b"), newFakeNodeNamed(t, "c")}
	var cluster []string
	for _, f := range nodes {
		f.member = true
		f.snapshot = nodes[0].snapshot // one backup for every member
		cluster = append(cluster, f.name+"=http://"+f.peer)
	}
	// b and c are down, as a restore of several members needs (their
	// manifests moved aside as the journal does).
	for _, f := range nodes[1:] {
		for _, m := range []string{kubeadm.EtcdYAML, kubeadm.APIYAML} {
			if err := os.MkdirAll(filepath.Join(f.root, kubeadm.LifeboatDir, "manifests"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(f.root, kubeadm.ManifestsDir, m), filepath.Join(f.root, kubeadm.LifeboatDir, "manifests", m)); err != nil {
				t.Fatal(err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			f.mu.Lock()
			up := f.etcd != nil
			f.mu.Unlock()
			if !up {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s's etcd still runs 30s after its manifest moved", f.name)
			}
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel) // before the nodes' cleanups: the restores end first
	now := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	type result struct {
		res *kubeadm.Result
		err error
	}
	done := make([]chan result, len(nodes))
	outs := make([]*syncWriter, len(nodes))
	start := func(i int) {
		f := nodes[i]
		n, j := plan(t, f, now)
		j.InitialCluster = strings.Join(cluster, ",")
		done[i], outs[i] = make(chan result, 1), &syncWriter{}
		o := f.options(outs[i])
		o.OthersHint = "run the same restore on the other nodes"
		go func() {
			res, err := kubeadm.Run(ctx, n, j, o)
			done[i] <- result{res, err}
		}()
	}
	start(0)
	// a waits for the others and says so.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(outs[0].String(), "members not up yet: b=http://"+nodes[1].peer); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, a's restore does not say it waits for b and c:\n%s", outs[0].String())
		}
	}
	select {
	case r := <-done[0]:
		t.Fatalf("a's restore ended before the other members ran: %v\n%s", r.err, outs[0].String())
	default:
	}
	start(1)
	start(2)
	for i, f := range nodes {
		r := <-done[i]
		if r.err != nil {
			t.Fatalf("%s: %v\n%s", f.name, r.err, outs[i].String())
		}
		if checks := strings.Join(r.res.Checks, "; "); !strings.Contains(checks, "match on all 3 members") && !strings.Contains(checks, "the 3 members agree") {
			t.Errorf("%s checked %v, want the HashKV of all 3 members", f.name, r.res.Checks)
		}
		if got := f.keys(t); got != before {
			t.Errorf("%s serves %q, want the snapshot's %q", f.name, got, before)
		}
	}
	ml, err := nodes[0].cli(t).MemberList(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(ml.Members) != 3 {
		t.Errorf("the restored cluster has %d members, want 3: %v", len(ml.Members), ml.Members)
	}
	if !strings.Contains(outs[0].String(), "run the same restore on the other nodes") {
		t.Errorf("a did not print what to run on the other nodes:\n%s", outs[0].String())
	}
}

// syncWriter is a buffer written by a restore's goroutine and read by the
// test.
type syncWriter struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *syncWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *syncWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}
