package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/embed"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// rawFrame is one gRPC message, passed through unparsed.
type rawFrame struct{ b []byte }

// rawCodec lets the proxy forward messages without knowing their types.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.(*rawFrame).b, nil }
func (rawCodec) Unmarshal(b []byte, v any) error {
	v.(*rawFrame).b = append([]byte(nil), b...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

const hashKVMethod = "/etcdserverpb.Maintenance/HashKV"

// grpcProxy starts a gRPC proxy in front of the plain-HTTP etcd member at
// target and returns its endpoint URL. Every call is forwarded as is,
// except that each HashKV response goes through hashKV first: it may
// rewrite the response or return an error for the client.
func grpcProxy(t *testing.T, target string, hashKV func(*pb.HashKVResponse) error) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient("passthrough:///"+u.Host, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	handler := func(_ any, ss grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(ss)
		md, _ := metadata.FromIncomingContext(ss.Context())
		ctx := metadata.NewOutgoingContext(ss.Context(), md.Copy())
		cs, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, method, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return err
		}
		go func() {
			for {
				var f rawFrame
				if err := ss.RecvMsg(&f); err != nil {
					_ = cs.CloseSend()
					return
				}
				if err := cs.SendMsg(&f); err != nil {
					return
				}
			}
		}()
		for {
			var f rawFrame
			if err := cs.RecvMsg(&f); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			if method == hashKVMethod {
				var resp pb.HashKVResponse
				if err := proto.Unmarshal(f.b, &resp); err != nil {
					return err
				}
				if err := hashKV(&resp); err != nil {
					return err
				}
				if f.b, err = proto.Marshal(&resp); err != nil {
					return err
				}
			}
			if err := ss.SendMsg(&f); err != nil {
				return err
			}
		}
	}
	srv := grpc.NewServer(grpc.UnknownServiceHandler(handler), grpc.ForceServerCodec(rawCodec{}))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return "http://" + lis.Addr().String()
}

// snapshotArgs returns the arguments of a snapshot into a fresh local store
// in dir.
func snapshotArgs(dir string, endpoints ...string) []string {
	return []string{"snapshot", "--store", "file://" + filepath.Join(dir, "store"), "--spool-dir", filepath.Join(dir, "spool"),
		"--cluster", "test", "--log-format", "json", "--dial-timeout", "2s", "--endpoints", strings.Join(endpoints, ",")}
}

// onlyManifest reads the one manifest of the store in dir (agents also
// store their status documents as JSON, under agents/).
func onlyManifest(t *testing.T, dir string) *repository.Manifest {
	t.Helper()
	var found []string
	for _, f := range storeFiles(t, filepath.Join(dir, "store")) {
		if strings.HasSuffix(f, ".json") && strings.Contains(filepath.ToSlash(f), "/snapshots/") {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("store holds manifests %v, want exactly one", found)
	}
	b, err := os.ReadFile(filepath.Join(dir, "store", found[0]))
	if err != nil {
		t.Fatal(err)
	}
	m, err := repository.ParseManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// followers returns the cluster's members that are not the leader.
func followers(t *testing.T, c *etcdtest.Cluster) (leader *etcdtest.Member, fs []*etcdtest.Member) {
	leader = c.Leader(t)
	for _, m := range c.Members {
		if m != leader {
			fs = append(fs, m)
		}
	}
	return leader, fs
}

// TestSnapshotHashKVFromOtherMember: the live HashKV comes from a follower
// other than the snapshot's member, and the manifest says which.
func TestSnapshotHashKVFromOtherMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	seedCluster(t, c, 300)
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		leader, _ := followers(t, c)
		code, out, errOut := runCLI(t, nil, snapshotArgs(dir, c.Endpoints()...)...)
		if code != 0 {
			t.Fatalf("snapshot exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		m := onlyManifest(t, dir)
		if m.HashKVEndpoint == "" || m.HashKVEndpoint == m.Endpoint {
			t.Fatalf("hash_kv_endpoint %q, want a member other than the snapshot's %s", m.HashKVEndpoint, m.Endpoint)
		}
		if m.HashKVSameMember != "" || m.HashKVStatus != "match" || m.HashKVMember == "" || m.HashKVMemberID == "" || m.HashKVMemberID == m.EtcdMemberID {
			t.Errorf("manifest hash_kv: status %q, member %q (%s), same member %q; want a match from another member",
				m.HashKVStatus, m.HashKVMember, m.HashKVMemberID, m.HashKVSameMember)
		}
		if m.HashKVEndpoint == leader.ClientURL {
			if c.Leader(t) != leader && attempt < 3 {
				os.RemoveAll(filepath.Join(dir, "store")) // leadership moved meanwhile: try again
				continue
			}
			t.Errorf("HashKV asked of the leader %s, want the other follower", leader.ClientURL)
		}
		return
	}
}

// TestSnapshotHashKVMismatchFromOtherMember: a member whose HashKV differs
// from the snapshot's (a proxy in front of it rewrites the hash, as a
// diverged store would answer) fails verification: exit 1, nothing stored.
func TestSnapshotHashKVMismatchFromOtherMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	seedCluster(t, c, 300)
	leader, fs := followers(t, c)
	diverged := grpcProxy(t, fs[1].ClientURL, func(r *pb.HashKVResponse) error {
		r.Hash ^= 0x5a5a
		return nil
	})
	dir := t.TempDir()
	args := append(snapshotArgs(dir, fs[0].ClientURL, diverged, leader.ClientURL), "--member", fs[0].ClientURL)
	code, out, errOut := runCLI(t, nil, args...)
	if code != exitFailed {
		t.Fatalf("snapshot exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, out, errOut)
	}
	for _, want := range []string{"failed verification", "hashkv mismatch", "hashkv from member " + fs[1].Name, diverged} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not contain %q:\n%s", want, errOut)
		}
	}
	if files := storeFiles(t, filepath.Join(dir, "store")); len(files) != 0 {
		t.Errorf("store holds %v after a failed verification", files)
	}
}

// TestAgentHashKVError: a live HashKV that fails is recorded as an error in
// the manifest and counted in the metrics; the backup is kept.
func TestAgentHashKVError(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	seedCluster(t, c, 300)
	leader, fs := followers(t, c)
	failing := grpcProxy(t, fs[1].ClientURL, func(*pb.HashKVResponse) error {
		return status.Error(codes.Unavailable, "injected hashkv failure")
	})
	dir := t.TempDir()
	textfile := filepath.Join(dir, "lifeboat.prom")
	args := append(snapshotArgs(dir, fs[0].ClientURL, failing, leader.ClientURL)[1:], "--member", fs[0].ClientURL)
	args = append([]string{"agent", "--once", "--textfile", textfile, "--prune-schedule", "", "--drill-schedule", "", "--lock=false"}, args...)
	code, out, errOut := runCLI(t, nil, args...)
	if code != exitOK {
		t.Fatalf("agent --once exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	m := onlyManifest(t, dir)
	if !strings.HasPrefix(m.HashKVStatus, "error: ") || !strings.Contains(m.HashKVStatus, "injected hashkv failure") {
		t.Errorf("hash_kv_status %q, want the error", m.HashKVStatus)
	}
	if m.HashKVEndpoint != failing {
		t.Errorf("hash_kv_endpoint %q, want %q", m.HashKVEndpoint, failing)
	}
	if !strings.Contains(errOut, "live HashKV failed") {
		t.Errorf("no log line about the failed HashKV:\n%s", errOut)
	}
	body, err := os.ReadFile(textfile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(body), "lifeboat_snapshot_hashkv_errors_total 1\n") {
		t.Errorf("textfile lacks lifeboat_snapshot_hashkv_errors_total 1:\n%s", body)
	}
}

// TestSnapshotTwoClusters: endpoints of two clusters are a configuration
// error (exit 2) that names each endpoint's cluster.
func TestSnapshotTwoClusters(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b := etcdtest.Start(t, etcdtest.Options{Members: 1})
	dir := t.TempDir()
	code, out, errOut := runCLI(t, nil, snapshotArgs(dir, a.Endpoints()[0], b.Endpoints()[0])...)
	if code != exitUsage {
		t.Fatalf("snapshot exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUsage, out, errOut)
	}
	for _, want := range []string{a.Endpoints()[0], b.Endpoints()[0],
		a.Members[0].Etcd.Server.Cluster().ID().String(), b.Members[0].Etcd.Server.Cluster().ID().String()} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr does not name %q:\n%s", want, errOut)
		}
	}
}

// TestSnapshotLoneSurvivor: with quorum lost (3 members, 2 stopped),
// `lifeboat snapshot --member URL` backs up the survivor, and the manifest
// says why no other member could check it.
func TestSnapshotLoneSurvivor(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	seedCluster(t, c, 300)
	survivor := c.Members[0]
	c.Members[1].Stop()
	c.Members[2].Stop()
	deadline := time.Now().Add(60 * time.Second)
	for survivor.Etcd.Server.Leader() != 0 { // a leader notices the lost quorum after an election timeout
		if time.Now().After(deadline) {
			t.Fatalf("%s still sees leader %s with both peers stopped", survivor.Name, survivor.Etcd.Server.Leader())
		}
		time.Sleep(50 * time.Millisecond)
	}
	dir := t.TempDir()
	// Without --member the survivor is not used: it may be a stale
	// minority. The error says what to run.
	code, out, errOut := runCLI(t, nil, snapshotArgs(dir, c.Endpoints()...)...)
	if code != exitFailed || !strings.Contains(errOut, "--member "+survivor.ClientURL) {
		t.Errorf("snapshot without --member: exit %d, want %d with a hint to --member\nstdout: %s\nstderr: %s", code, exitFailed, out, errOut)
	}
	code, out, errOut = runCLI(t, nil, append(snapshotArgs(dir, c.Endpoints()...), "--member", survivor.ClientURL)...)
	if code != exitOK {
		t.Fatalf("snapshot --member %s exit %d\nstdout: %s\nstderr: %s", survivor.ClientURL, code, out, errOut)
	}
	m := onlyManifest(t, dir)
	if m.Endpoint != survivor.ClientURL || m.HashKVEndpoint != survivor.ClientURL {
		t.Errorf("snapshot from %s, hashkv from %s; want both from the survivor %s", m.Endpoint, m.HashKVEndpoint, survivor.ClientURL)
	}
	for _, want := range []string{"no other member could answer", c.Members[1].ClientURL, c.Members[2].ClientURL} {
		if !strings.Contains(m.HashKVSameMember, want) {
			t.Errorf("hash_kv_same_member %q does not contain %q", m.HashKVSameMember, want)
		}
	}
	t.Logf("hash_kv_status %q, hash_kv_same_member %q", m.HashKVStatus, m.HashKVSameMember)
}

// TestLiveHashKVModes: snapshot.live_hashkv on a single-member cluster.
func TestLiveHashKVModes(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 200)
	tests := []struct {
		mode       string
		wantStatus string
		wantSame   string
	}{
		{mode: "", wantStatus: "match", wantSame: "single-member cluster"},
		{mode: "always", wantStatus: "match", wantSame: "single-member cluster"},
		{mode: "auto", wantStatus: "deferred to the drill: single-member cluster"},
		{mode: "defer", wantStatus: "deferred to the drill"},
	}
	for _, tt := range tests {
		t.Run("mode "+tt.mode, func(t *testing.T) {
			dir := t.TempDir()
			args := snapshotArgs(dir, c.Endpoints()...)
			if tt.mode != "" {
				args = append(args, "--live-hashkv", tt.mode)
			}
			code, out, errOut := runCLI(t, nil, args...)
			if code != exitOK {
				t.Fatalf("snapshot exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			m := onlyManifest(t, dir)
			if !strings.HasPrefix(m.HashKVStatus, tt.wantStatus) || m.HashKVSameMember != tt.wantSame {
				b, _ := json.Marshal(m)
				t.Errorf("hash_kv_status %q, hash_kv_same_member %q; want %q, %q\n%s", m.HashKVStatus, m.HashKVSameMember, tt.wantStatus, tt.wantSame, b)
			}
			if tt.mode != "defer" {
				return
			}
			// The deferred comparison is the drill's: the restored
			// member's HashKV against the file's.
			code, out, errOut = runCLI(t, nil, "drill", "latest", "-o", "json", "--store", "file://"+filepath.Join(dir, "store"),
				"--cluster", "test", "--spool-dir", filepath.Join(dir, "spool"), "--scratch-dir", filepath.Join(dir, "scratch"), "--log-format", "json")
			if code != exitOK {
				t.Fatalf("drill exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
			}
			var r repository.DrillReport
			if err := json.Unmarshal([]byte(out), &r); err != nil {
				t.Fatalf("drill report: %v\n%s", err, out)
			}
			want := fmt.Sprintf("%08x", m.HashKV)
			found := false
			for _, ch := range r.Checks {
				if ch.Name == "hashkv" {
					found = true
					if !ch.Passed || !strings.Contains(ch.Actual, want) {
						t.Errorf("drill hashkv check %+v, want the restored member's hash %s", ch, want)
					}
				}
			}
			if !found {
				t.Errorf("drill made no hashkv check: %+v", r.Checks)
			}
		})
	}
	code, _, errOut := runCLI(t, nil, append(snapshotArgs(t.TempDir(), c.Endpoints()...), "--live-hashkv", "sometimes")...)
	if code != exitUsage || !strings.Contains(errOut, "snapshot.live_hashkv") {
		t.Errorf("--live-hashkv sometimes: exit %d, want %d naming the key:\n%s", code, exitUsage, errOut)
	}
}

// diverge stops m, changes the value of the newest revision of one key in
// its backend, as a disk or software fault that the raft log does not see
// would, and starts it again. Its store then differs from its peers' at
// every revision from that one on.
func diverge(t *testing.T, m *etcdtest.Member) {
	t.Helper()
	cfg := m.Etcd.Config()
	m.Stop()
	db, err := bolt.Open(filepath.Join(m.DataDir, "member", "snap", "db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte("key"))
		cur := b.Cursor()
		for k, v := cur.Last(); k != nil; k, v = cur.Prev() {
			var kv mvccpb.KeyValue
			if err := proto.Unmarshal(v, &kv); err != nil {
				return err
			}
			if len(kv.Value) == 0 {
				continue
			}
			kv.Value[0] ^= 1
			nv, err := proto.Marshal(&kv)
			if err != nil {
				return err
			}
			return b.Put(append([]byte(nil), k...), nv)
		}
		return errors.New("no key with a value")
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("change %s's backend: %v", m.Name, err)
	}
	e, err := embed.StartEtcd(&cfg)
	if err != nil {
		t.Fatalf("restart %s: %v", m.Name, err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(60 * time.Second):
		t.Fatalf("%s not ready after restart", m.Name)
	}
	m.Etcd = e
}

// TestSnapshotDivergedMember: one member's store really differs from the
// others' at the same revision. A snapshot of a healthy member checked
// against it, and a snapshot of it checked against a healthy member, both
// fail verification; the snapshot's own member would have confirmed each.
func TestSnapshotDivergedMember(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	seedCluster(t, c, 300)
	_, fs := followers(t, c)
	bad, good := fs[1], fs[0]
	diverge(t, bad)
	leader := c.Leader(t)
	for _, tt := range []struct{ name, snap, other string }{
		{"healthy member checked by the diverged one", good.ClientURL, bad.ClientURL},
		{"diverged member checked by a healthy one", bad.ClientURL, good.ClientURL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			// The leader last: HashKV goes to the other follower.
			args := append(snapshotArgs(dir, tt.snap, tt.other, leader.ClientURL), "--member", tt.snap)
			code, out, errOut := runCLI(t, nil, args...)
			if code != exitFailed {
				t.Fatalf("snapshot exit %d, want %d\nstdout: %s\nstderr: %s", code, exitFailed, out, errOut)
			}
			for _, want := range []string{"hashkv mismatch", tt.other} {
				if !strings.Contains(errOut, want) {
					t.Errorf("stderr does not contain %q:\n%s", want, errOut)
				}
			}
		})
	}
}

// TestSnapshotWarnsHashKVWithItself: when no other member can answer
// HashKV (here: --endpoints names one of three members), the live
// comparison compares the snapshot's member with itself, which detects no
// divergence: the log warns and the summary says so. A single-member
// cluster has no other member: no warning (issue 29).
func TestSnapshotWarnsHashKVWithItself(t *testing.T) {
	const warning = "HashKV compared the snapshot's member with itself"
	t.Run("one of three", func(t *testing.T) {
		c := etcdtest.Start(t, etcdtest.Options{Members: 3})
		seedCluster(t, c, 50)
		code, out, errOut := runCLI(t, nil, snapshotArgs(t.TempDir(), c.Endpoints()[0])...)
		if code != exitOK {
			t.Fatalf("snapshot exit %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if !strings.Contains(errOut, `"level":"WARN"`) || !strings.Contains(errOut, warning) {
			t.Errorf("no warning logged that HashKV compared a member with itself:\n%s", errOut)
		}
		if !strings.Contains(out, "warning: "+warning) {
			t.Errorf("the summary does not warn:\n%s", out)
		}
	})
	t.Run("single member", func(t *testing.T) {
		c := etcdtest.Start(t, etcdtest.Options{Members: 1})
		seedCluster(t, c, 50)
		code, out, errOut := runCLI(t, nil, snapshotArgs(t.TempDir(), c.Endpoints()...)...)
		if code != exitOK || strings.Contains(out+errOut, warning) {
			t.Errorf("snapshot exit %d; a single-member cluster warns\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
}
