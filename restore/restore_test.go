package restore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// fetched is a backup fetched into a local raw snapshot file.
type fetched struct {
	src  *restoretest.Source
	m    *repository.Manifest
	path string
}

func fetchBackup(t *testing.T, objects int) *fetched {
	t.Helper()
	src := restoretest.StartSource(t, objects)
	b := restoretest.DirRepo(t, t.TempDir())
	m := src.Backup(t, b, repository.Encoding{Compression: "zstd"})
	path := filepath.Join(t.TempDir(), "snapshot.db")
	res, err := repository.Fetch(t.Context(), b, m, path, repository.FetchOptions{})
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if res.Size != m.DBSize+sha256.Size || res.SnapshotSHA256 != m.SnapshotSHA256 || res.ObjectSize != m.ObjectSize {
		t.Fatalf("Fetch result %+v does not match manifest %+v", res, m)
	}
	return &fetched{src: src, m: m, path: path}
}

func TestRestoreThreeMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 500)
	srcHash, err := f.src.C.Client(t).HashKV(t.Context(), f.src.C.Endpoints()[0], f.m.Revision)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"embedded", "etcd binary"} {
		t.Run(mode, func(t *testing.T) {
			var bin string
			if mode == "etcd binary" {
				bin = etcdtest.Current.Need(t)
			}
			var parts []string
			for i := range 3 {
				u, err := child.FreeLoopbackURL()
				if err != nil {
					t.Fatal(err)
				}
				parts = append(parts, fmt.Sprintf("m%d=%s", i, u))
			}
			dir := t.TempDir()
			var seen []string
			res, err := restore.Restore(t.Context(), restore.RestoreOptions{
				SnapshotPath: f.path, DataDir: filepath.Join(dir, "{name}"),
				InitialCluster: strings.Join(parts, ","), InitialClusterToken: "restored-" + mode,
				OnMember: func(m restore.RestoredMember) { seen = append(seen, m.Name) },
			})
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			if diff := cmp.Diff([]string{"m0", "m1", "m2"}, seen); diff != "" {
				t.Errorf("members restored (-want +got):\n%s", diff)
			}
			var eps []string
			for _, m := range res.Members {
				if m.DataDir != filepath.Join(dir, m.Name) {
					t.Errorf("member %s in %s", m.Name, m.DataDir)
				}
				if fi, err := os.Stat(m.DataDir); err != nil || fi.Mode().Perm() != 0o700 {
					t.Errorf("data dir %s: %v %v", m.DataDir, fi.Mode(), err)
				}
				eps = append(eps, startMember(t, bin, m))
			}
			cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer cli.Close()
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			ids := map[uint64]bool{}
			for _, ep := range eps {
				h := waitHashKV(ctx, t, cli, ep, f.m.Revision)
				if h.Hash != srcHash.Hash || h.Hash != f.m.HashKV {
					t.Errorf("member %s: HashKV at %d = 0x%08x, source 0x%08x, manifest 0x%08x", ep, f.m.Revision, h.Hash, srcHash.Hash, f.m.HashKV)
				}
				st, err := cli.Status(ctx, ep)
				if err != nil {
					t.Fatal(err)
				}
				ids[st.Leader] = true
			}
			if len(ids) != 1 || ids[0] {
				t.Errorf("members disagree on the leader: %v", ids)
			}
			ml, err := cli.MemberList(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(ml.Members) != 3 {
				t.Errorf("member list %v", ml.Members)
			}
			if _, err := cli.Put(ctx, "/after/restore", "works"); err != nil {
				t.Fatalf("write to the restored cluster: %v", err)
			}
			one, err := clientv3.New(clientv3.Config{Endpoints: eps[2:], DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
			if err != nil {
				t.Fatal(err)
			}
			defer one.Close()
			got, err := one.Get(ctx, "/after/restore")
			if err != nil || len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "works" {
				t.Errorf("read back from m2: %v %v", got, err)
			}
			all, err := one.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
			if err != nil || all.Count != int64(f.m.TotalKeys)+1 {
				t.Errorf("keys after restore and one put: %v (%v), want %d", all.Count, err, f.m.TotalKeys+1)
			}
		})
	}
}

// waitHashKV polls HashKV until the member answers (the cluster elects a
// leader first).
func waitHashKV(ctx context.Context, t *testing.T, cli *clientv3.Client, ep string, rev int64) *clientv3.HashKVResponse {
	t.Helper()
	for {
		h, err := cli.HashKV(ctx, ep, rev)
		if err == nil {
			return h
		}
		select {
		case <-ctx.Done():
			t.Fatalf("HashKV from %s: %v", ep, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startMember starts a restored member with the flags Restore printed for
// it (the binary) or their embed equivalent, and returns its client URL.
func startMember(t *testing.T, bin string, m restore.RestoredMember) string {
	t.Helper()
	client, err := child.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	if bin != "" {
		args := append(m.EtcdFlags(), "--listen-client-urls", client, "--advertise-client-urls", client, "--log-level", "error")
		cmd := exec.Command(bin, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				t.Logf("etcd %s output:\n%s", m.Name, out.String())
			}
		})
		return client
	}
	cfg := embed.NewConfig()
	cfg.Name = m.Name
	cfg.Dir = m.DataDir
	cu, _ := url.Parse(client)
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	var peers []url.URL
	for _, p := range m.PeerURLs {
		pu, _ := url.Parse(p)
		peers = append(peers, *pu)
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = peers, peers
	cfg.InitialCluster = m.InitialCluster
	cfg.InitialClusterToken = m.Token
	cfg.Logger = "zap"
	cfg.LogLevel = "error"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start %s: %v", m.Name, err)
	}
	t.Cleanup(e.Close)
	return client
}

func TestRestoreRefusesNonEmpty(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 100)
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(dir, "member"), 0o700); err != nil {
		t.Fatal(err)
	}
	precious := filepath.Join(dir, "member", "precious")
	if err := os.WriteFile(precious, []byte("old data"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts := restore.RestoreOptions{SnapshotPath: f.path, DataDir: dir, Name: "m1", PeerURLs: []string{"http://127.0.0.1:2380"}}
	if _, err := restore.Restore(t.Context(), opts); !errors.Is(err, restore.ErrDataDirNotEmpty) {
		t.Fatalf("Restore into a non-empty dir: %v, want ErrDataDirNotEmpty", err)
	}
	if got, err := os.ReadFile(precious); err != nil || string(got) != "old data" {
		t.Fatalf("old data changed: %q %v", got, err)
	}

	opts.Force = true
	opts.Now = func() time.Time { return time.Date(2026, 12, 1, 3, 4, 5, 0, time.UTC) }
	res, err := restore.Restore(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Members[0].Seconds <= 0 {
		t.Errorf("member restored in %vs with a fixed naming clock: its time must come from the real clock", res.Members[0].Seconds)
	}
	aside := dir + ".lifeboat-old-20261201T030405Z"
	if res.Members[0].MovedAside != aside {
		t.Errorf("moved aside to %q, want %q", res.Members[0].MovedAside, aside)
	}
	if got, err := os.ReadFile(filepath.Join(aside, "member", "precious")); err != nil || string(got) != "old data" {
		t.Errorf("old data not kept aside: %q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "member", "snap", "db")); err != nil {
		t.Errorf("no restored db: %v", err)
	}
	// Again: the second old copy gets its own name.
	res, err = restore.Restore(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Members[0].MovedAside != aside+"-1" {
		t.Errorf("second move aside to %q", res.Members[0].MovedAside)
	}
	if _, err := os.Stat(filepath.Join(aside, "member", "precious")); err != nil {
		t.Errorf("first old copy gone: %v", err)
	}
}

// TestRestoreRollsBack: when the run stops half-way (here SIGTERM after
// the second member), what it wrote goes and what it moved aside comes
// back.
func TestRestoreRollsBack(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 100)
	root := t.TempDir()
	m0 := filepath.Join(root, "m0")
	if err := os.MkdirAll(m0, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(m0, "old"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "m1"), 0o700); err != nil { // empty: restored into
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	_, err := restore.Restore(ctx, restore.RestoreOptions{
		SnapshotPath: f.path, DataDir: filepath.Join(root, "{name}"), WALDir: filepath.Join(root, "wal-{name}"),
		InitialCluster: "m0=http://127.0.0.1:1,m1=http://127.0.0.1:2,m2=http://127.0.0.1:3", Force: true,
		OnMember: func(m restore.RestoredMember) {
			if m.Name == "m1" {
				cancel()
			}
		},
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Restore error %v, want context.Canceled", err)
	}
	entries, _ := os.ReadDir(root)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if diff := cmp.Diff([]string{"m0", "m1"}, names); diff != "" {
		t.Errorf("left in %s (-want +got):\n%s", root, diff)
	}
	if got, err := os.ReadDir(m0); err != nil || len(got) != 1 || got[0].Name() != "old" {
		t.Errorf("m0 not moved back: %v %v", got, err)
	}
	if got, err := os.ReadDir(filepath.Join(root, "m1")); err != nil || len(got) != 0 {
		t.Errorf("m1 not emptied again: %v %v", got, err)
	}
}

func TestRestoreOptions(t *testing.T) {
	snap := filepath.Join(t.TempDir(), "s.db")
	if err := os.WriteFile(snap, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		opts    restore.RestoreOptions
		wantErr string
	}{
		{name: "several members without a template", opts: restore.RestoreOptions{DataDir: "/d", InitialCluster: "a=http://h:1,b=http://h:2"}, wantErr: "give --name"},
		{name: "name not in cluster", opts: restore.RestoreOptions{Name: "c", InitialCluster: "a=http://h:1,b=http://h:2"}, wantErr: "not a member"},
		{name: "bad initial cluster", opts: restore.RestoreOptions{InitialCluster: "a"}, wantErr: "not name=peerURL"},
		{name: "bad peer URL", opts: restore.RestoreOptions{InitialCluster: "a=h:1"}, wantErr: "not a URL"},
		{name: "mark compacted alone", opts: restore.RestoreOptions{MarkCompacted: true}, wantErr: "needs --bump-revision"},
		{name: "peer URLs disagree", opts: restore.RestoreOptions{Name: "a", InitialCluster: "a=http://h:1", PeerURLs: []string{"http://h:9"}}, wantErr: "do not match"},
		{name: "shared WAL dir", opts: restore.RestoreOptions{DataDir: "/r/{name}", WALDir: "/w", InitialCluster: "a=http://h:1,b=http://h:2"}, wantErr: "--wal-dir must contain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.SnapshotPath = snap
			_, err := restore.Restore(t.Context(), tt.opts)
			if !errors.Is(err, restore.ErrOptions) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Restore error %v, want ErrOptions with %q", err, tt.wantErr)
			}
		})
	}
}

func TestEtcdFlags(t *testing.T) {
	m := restore.RestoredMember{
		Name: "m1", DataDir: "/restore/m1", WALDir: "/wal/m1", PeerURLs: []string{"https://10.0.0.2:2380"},
		InitialCluster: "m0=https://10.0.0.1:2380,m1=https://10.0.0.2:2380", Token: "t1",
	}
	want := []string{"--name", "m1", "--data-dir", "/restore/m1", "--wal-dir", "/wal/m1",
		"--initial-advertise-peer-urls", "https://10.0.0.2:2380", "--listen-peer-urls", "https://10.0.0.2:2380",
		"--initial-cluster", "m0=https://10.0.0.1:2380,m1=https://10.0.0.2:2380", "--initial-cluster-token", "t1", "--initial-cluster-state", "new"}
	if diff := cmp.Diff(want, m.EtcdFlags()); diff != "" {
		t.Errorf("EtcdFlags (-want +got):\n%s", diff)
	}
	m.PeerURLs = []string{"https://etcd-1.example:2380"}
	for _, f := range m.EtcdFlags() {
		if f == "--listen-peer-urls" {
			t.Error("--listen-peer-urls printed for a host name (etcd listens on IPs only)")
		}
	}
}

func TestSelect(t *testing.T) {
	b := restoretest.DirRepo(t, t.TempDir())
	ctx := t.Context()
	if _, err := repository.Select(ctx, b, "random", rand.IntN); !errors.Is(err, repository.ErrNoBackups) {
		t.Errorf("Select(random) on an empty store: %v", err)
	}
	var ids []string
	for i := range 4 {
		id := repository.NewID(time.Date(2026, 11, 30, 10+i, 0, 0, 0, time.UTC), int64(100+i))
		m := &repository.Manifest{
			Format: repository.ManifestFormat, ID: id, Cluster: b.Cluster, Revision: int64(100 + i),
			Object: b.ObjectKey(id, repository.Encoding{Compression: "none"}), ObjectSHA256: strings.Repeat("a", 64), SnapshotSHA256: strings.Repeat("b", 64),
			Compression: "none", Encryption: "none",
		}
		if i != 1 { // backup 1's object is missing: never chosen
			if _, err := b.Store.Put(ctx, m.Object, strings.NewReader(""), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.PutManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	got := map[string]int{}
	for i := range 3 {
		m, err := repository.Select(ctx, b, "random", func(n int) int { return i % n })
		if err != nil {
			t.Fatal(err)
		}
		got[m.ID]++
	}
	if diff := cmp.Diff(map[string]int{ids[2]: 2, ids[0]: 1}, got); diff != "" {
		t.Errorf("random picks (-want +got):\n%s", diff)
	}
	for ref, want := range map[string]string{"latest": ids[3], ids[1]: ids[1]} {
		m, err := repository.Select(ctx, b, ref, rand.IntN)
		if err != nil || m.ID != want {
			t.Errorf("Select(%s) = %v, %v; want %s", ref, m, err, want)
		}
	}
}
