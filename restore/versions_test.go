package restore_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// versionStage is a point of the workload at which a backup is taken.
type versionStage struct {
	name string
	// write continues the workload on cli.
	write func(t *testing.T, cli *clientv3.Client)
	// compactedAtEnd: the stage ends with a compaction at the current
	// revision, so the source member answers HashKV there with its
	// compaction hash: the backup's HashKV is not comparable, but the
	// restored member's must still equal the file's.
	compactedAtEnd bool
}

var versionStages = []versionStage{
	{name: "puts, overwrites, deletes, never compacted", write: func(t *testing.T, cli *clientv3.Client) {
		for v := range 4 {
			for i := range 60 {
				mustDo(t, cli, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns%d/p%03d", i%3, i), strings.Repeat("v", 50+v*40+i)))
			}
		}
		mustDo(t, cli, clientv3.OpDelete("/registry/pods/ns1/", clientv3.WithPrefix()))
		mustDo(t, cli, clientv3.OpPut("/registry/pods/ns1/p001", "recreated"))
	}},
	{name: "compacted at a tombstone, then more writes", write: func(t *testing.T, cli *clientv3.Client) {
		lease, err := cli.Grant(t.Context(), 3600)
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, cli, clientv3.OpPut("/registry/leases/l1", "held", clientv3.WithLease(lease.ID)))
		_, err = cli.Txn(t.Context()).Then(
			clientv3.OpPut("/registry/configmaps/c1", "a"), clientv3.OpPut("/registry/configmaps/c2", "b"),
			clientv3.OpDelete("/registry/pods/ns0/p000"),
		).Commit()
		if err != nil {
			t.Fatal(err)
		}
		mustDo(t, cli, clientv3.OpPut("/registry/pods/ns2/p002", "overwritten"))
		compact(t, cli, mustDo(t, cli, clientv3.OpDelete("/registry/pods/ns2/p005")))
		for i := range 20 {
			mustDo(t, cli, clientv3.OpPut(fmt.Sprintf("/registry/pods/ns0/p%03d", i*3), "after compaction"))
		}
		mustDo(t, cli, clientv3.OpDelete("/registry/configmaps/c1"))
		mustDo(t, cli, clientv3.OpPut("/registry/events/e1", "new"))
	}},
	{name: "compacted at a tombstone at the current revision", write: func(t *testing.T, cli *clientv3.Client) {
		mustDo(t, cli, clientv3.OpPut("/registry/events/e2", "short-lived"))
		compact(t, cli, mustDo(t, cli, clientv3.OpDelete("/registry/events/e2")))
	}, compactedAtEnd: true},
	{name: "every key deleted, compacted at the delete", write: func(t *testing.T, cli *clientv3.Client) {
		compact(t, cli, mustDo(t, cli, clientv3.OpDelete("/", clientv3.WithPrefix())))
		mustDo(t, cli, clientv3.OpPut("/registry/namespaces/default", "back"))
		mustDo(t, cli, clientv3.OpDelete("/registry/namespaces/default"))
	}},
}

func mustDo(t *testing.T, cli *clientv3.Client, op clientv3.Op) int64 {
	t.Helper()
	resp, err := cli.Do(t.Context(), op)
	if err != nil {
		t.Fatalf("%s %q: %v", opName(op), op.KeyBytes(), err)
	}
	switch {
	case resp.Put() != nil:
		return resp.Put().Header.Revision
	case resp.Del() != nil:
		return resp.Del().Header.Revision
	}
	return 0
}

func opName(op clientv3.Op) string {
	if op.IsDelete() {
		return "delete"
	}
	return "put"
}

// compact compacts at rev and waits until the compaction is done on disk.
func compact(t *testing.T, cli *clientv3.Client, rev int64) {
	t.Helper()
	if _, err := cli.Compact(t.Context(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact %d: %v", rev, err)
	}
}

// TestVersions backs up etcd servers of each supported version with the
// real pipeline at several points of a workload that exercises HashKV's
// rules (overwrites, tombstones, transactions, leases, compaction at a
// tombstone, keys in many revisions), then restores each backup into a data
// dir and boots that version's etcd on it, and etcd of go.mod's version (a
// drill's default). The backup must pass with the file's HashKV equal to
// the source member's, and each restored member must answer the file's
// revision, key count and HashKV.
func TestVersions(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd servers")
	}
	for _, v := range etcdtest.Versions {
		t.Run("etcd "+v.Name, func(t *testing.T) {
			t.Parallel()
			bin := v.Need(t)
			ctx := t.Context()
			src := etcdtest.StartBinary(t, bin)
			cli := src.Client(t)
			ms, err := cli.Status(ctx, src.ClientURL)
			if err != nil {
				t.Fatal(err)
			}
			if minor, _ := verify.HashKVRules(ms.Version); minor != v.Minor || v.Name != v.Minor && ms.Version != v.Name {
				t.Fatalf("%s is etcd %s, want %s", bin, ms.Version, v.Name)
			}
			b := restoretest.DirRepo(t, t.TempDir())
			for _, stage := range versionStages {
				stage.write(t, cli)
				m, err := backup.Run(ctx, backup.Job{
					Etcd:     snapshot.Config{Endpoints: []string{src.ClientURL}},
					SpoolDir: t.TempDir(),
					Backups:  b,
					Encoding: repository.Encoding{Compression: "zstd"},
					Version:  "test",
				}, slog.New(slog.DiscardHandler))
				if err != nil {
					t.Fatalf("%s: backup of etcd %s: %v", stage.name, ms.Version, err)
				}
				checkVersionBackup(t, v, bin, ms.Version, stage, cli, src.ClientURL, b, m)
			}
		})
	}
}

func checkVersionBackup(t *testing.T, v etcdtest.Version, bin, version string, stage versionStage, cli *clientv3.Client, ep string, b *repository.Repo, m *repository.Manifest) {
	t.Helper()
	ctx := t.Context()
	if m.EtcdVersion != version {
		t.Errorf("%s: manifest etcd version %q, member %q", stage.name, m.EtcdVersion, version)
	}
	raw := filepath.Join(t.TempDir(), "snapshot.db")
	if _, err := repository.Fetch(ctx, b, m, raw, repository.FetchOptions{}); err != nil {
		t.Fatalf("%s: fetch: %v", stage.name, err)
	}
	st, err := verify.File(ctx, raw)
	if err != nil {
		t.Fatalf("%s: File: %v", stage.name, err)
	}
	if !st.HashKVComparable || st.HashKV != m.HashKV || st.Revision != m.Revision {
		t.Fatalf("%s: File %+v, manifest revision %d hashkv %#x", stage.name, st, m.Revision, m.HashKV)
	}
	// The source member, unchanged since the backup.
	live, err := cli.HashKV(ctx, ep, st.Revision)
	if err != nil {
		t.Fatalf("%s: HashKV(%d) of etcd %s: %v", stage.name, st.Revision, version, err)
	}
	if live.Header.Revision != st.Revision {
		t.Errorf("%s: File's revision %d, etcd %s is at %d", stage.name, st.Revision, version, live.Header.Revision)
	}
	if stage.compactedAtEnd {
		if !strings.HasPrefix(m.HashKVStatus, "not comparable: member compact revision") {
			t.Errorf("%s: hashkv status %q, want not comparable (the member's compaction hash)", stage.name, m.HashKVStatus)
		}
	} else if m.HashKVStatus != "match" || live.Hash != st.HashKV || max(live.CompactRevision, 0) != st.CompactRevision {
		t.Errorf("%s: hashkv status %q; File %#x at compact revision %d, etcd %s %#x at %d",
			stage.name, m.HashKVStatus, st.HashKV, st.CompactRevision, version, live.Hash, live.CompactRevision)
	}

	// Restore into a data dir and boot the same version on it, then etcd
	// of go.mod's version: the drill's etcd unless --etcd-binary says
	// otherwise.
	bootRestored(t, stage.name, raw, bin, version, st)
	if v != etcdtest.Current {
		bin37 := etcdtest.Current.Need(t)
		bootRestored(t, stage.name, raw, bin37, "", st)
	}
}

// bootRestored restores the snapshot at raw into a new data dir, boots
// etcd binary bin on it and checks that it answers the revision, key count
// and HashKV of st, and runs version (when not "").
func bootRestored(t *testing.T, stage, raw, bin, version string, st verify.Status) {
	t.Helper()
	ctx := t.Context()
	peer, err := child.FreeLoopbackURL()
	if err != nil {
		t.Fatal(err)
	}
	dataDir := filepath.Join(t.TempDir(), "member")
	if _, err := restore.Restore(ctx, restore.RestoreOptions{
		SnapshotPath: raw, DataDir: dataDir, Name: "restored", InitialCluster: "restored=" + peer,
	}); err != nil {
		t.Fatalf("%s: restore: %v", stage, err)
	}
	srv, err := child.StartEtcd(ctx, child.EtcdOptions{DataDir: dataDir, Name: "restored", PeerURL: peer, Binary: bin})
	if err != nil {
		t.Fatalf("%s: %s on the restored data dir: %v", stage, bin, err)
	}
	defer srv.Close()
	rc, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	rs, err := rc.Status(ctx, srv.ClientURL)
	if err != nil {
		t.Fatalf("%s: status of the restored member: %v", stage, err)
	}
	if version != "" && rs.Version != version {
		t.Errorf("%s: restored member runs etcd %s, want %s", stage, rs.Version, version)
	}
	got, err := rc.HashKV(ctx, srv.ClientURL, st.Revision)
	if err != nil {
		t.Fatalf("%s: HashKV(%d) of the restored etcd %s: %v", stage, st.Revision, rs.Version, err)
	}
	if got.Hash != st.HashKV || max(got.CompactRevision, 0) != st.CompactRevision || got.Header.Revision != st.Revision {
		t.Errorf("%s: restored etcd %s: hashkv %#x compact %d revision %d; File: %#x compact %d revision %d",
			stage, rs.Version, got.Hash, got.CompactRevision, got.Header.Revision, st.HashKV, st.CompactRevision, st.Revision)
	}
	all, err := rc.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if all.Count != int64(st.TotalKeys) {
		t.Errorf("%s: restored etcd %s holds %d keys, File counted %d", stage, rs.Version, all.Count, st.TotalKeys)
	}
}
