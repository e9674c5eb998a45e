package drill_test

import (
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestDrillOfOnceRestoredCluster: a cluster restored once with a
// revision bump (every kubeadm restore, restore --bump-revision) keeps
// the keyless record etcdutl's bump writes; its next backups hold it, and
// their drills must still pass: the key count etcd serves leaves it out.
func TestDrillOfOnceRestoredCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	src := restoretest.StartSource(t, 200)
	snap := src.C.SaveSnapshot(t)
	ports := freeLocalPorts(t, 2)
	peer := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	client := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	dir := filepath.Join(t.TempDir(), "m0")
	if _, err := restore.Restore(t.Context(), restore.RestoreOptions{SnapshotPath: snap, DataDir: dir, Name: "m0",
		PeerURLs: []string{peer}, RevisionBump: 1_000_000, MarkCompacted: true}); err != nil {
		t.Fatal(err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = "m0", dir
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	pu, cu := mustURL(t, peer), mustURL(t, client)
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{pu}, []url.URL{pu}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{cu}, []url.URL{cu}
	cfg.InitialCluster = "m0=" + peer
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(30 * time.Second):
		t.Fatal("the restored etcd did not become ready")
	}

	b := restoretest.DirRepo(t, t.TempDir())
	m, err := backup.Run(t.Context(), backup.Job{
		Etcd: snapshot.Config{Endpoints: []string{client}, Member: "any"}, SpoolDir: t.TempDir(),
		Backups: b, Encoding: repository.Encoding{Compression: "zstd"}, Version: "test",
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("backup of the restored cluster: %v", err)
	}
	rep, err := drill.Run(t.Context(), drill.Options{Backups: b, Manifest: m, ScratchDir: t.TempDir(), Version: "test"})
	if err != nil || !rep.Passed {
		t.Fatalf("drill of a backup of a once-restored cluster: %v\nchecks: %+v", err, rep.Checks)
	}
	for _, c := range rep.Checks {
		if c.Name == "total keys" && c.Actual != fmt.Sprint(m.TotalKeys-1) {
			t.Errorf("total keys check %+v: want the manifest's %d keys less the bump's keyless record", c, m.TotalKeys)
		}
	}
}

func freeLocalPorts(t *testing.T, n int) []int {
	t.Helper()
	var out []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out
}

func mustURL(t *testing.T, s string) url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return *u
}
