package etcdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// SaveSnapshot writes a snapshot of the cluster's current state (with
// its integrity hash, as `etcdctl snapshot save` does) to a file under
// t.TempDir and returns its path.
func (c *Cluster) SaveSnapshot(t testing.TB) string {
	t.Helper()
	cli := c.Client(t)
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	defer rc.Close()
	p := filepath.Join(t.TempDir(), "snapshot.db")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadFrom(rc); err != nil {
		f.Close()
		t.Fatalf("etcdtest: snapshot: %v", err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// RestoreInPlace stops the member of a one-member cluster and starts it
// again on a data directory restored from the snapshot file snap
// (etcdutl's snapshot restore) with the same name, peer URL and cluster
// token, on the same ports: the cluster keeps its ID and its client URL
// and goes back to the snapshot's revision, as after an operator's plain
// `etcdutl snapshot restore` (kubeadm's default). It waits until the
// member is ready and has a leader; Members[0] is the new server.
func (c *Cluster) RestoreInPlace(t testing.TB, snap string) {
	t.Helper()
	if len(c.Members) != 1 {
		t.Fatalf("etcdtest: RestoreInPlace needs a one-member cluster, not %d", len(c.Members))
	}
	old := c.Members[0]
	prev := old.Etcd.Config()
	old.Stop()
	dir := filepath.Join(filepath.Dir(old.DataDir), fmt.Sprintf("%s-restored-%s", old.Name, randomHex(4)))
	err := snapshot.NewV3(zap.NewNop()).Restore(snapshot.RestoreConfig{
		SnapshotPath: snap, Name: old.Name, OutputDataDir: dir, PeerURLs: []string{old.PeerURL},
		InitialCluster: prev.InitialCluster, InitialClusterToken: prev.InitialClusterToken,
	})
	if err != nil {
		t.Fatalf("etcdtest: restore %s: %v", snap, err)
	}
	cfg := embed.NewConfig()
	cfg.Name, cfg.Dir = old.Name, dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = prev.ListenClientUrls, prev.AdvertiseClientUrls
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = prev.ListenPeerUrls, prev.AdvertisePeerUrls
	cfg.InitialCluster, cfg.InitialClusterToken = prev.InitialCluster, prev.InitialClusterToken
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.ClientTLSInfo = prev.ClientTLSInfo
	cfg.Logger, cfg.ZapLoggerBuilder = "zap", embed.NewZapLoggerBuilder(c.logger)
	cfg.TickMs, cfg.ElectionMs = prev.TickMs, prev.ElectionMs
	cfg.UnsafeNoFsync, cfg.BcryptCost, cfg.QuotaBackendBytes = prev.UnsafeNoFsync, prev.BcryptCost, prev.QuotaBackendBytes
	// The old server's ports may take a moment to be free again.
	deadline := time.Now().Add(readyTimeout)
	var e *embed.Etcd
	for {
		e, err = embed.StartEtcd(cfg)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "address already in use") || time.Now().After(deadline) {
			t.Fatalf("etcdtest: start the restored member: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	m := &Member{Name: old.Name, ClientURL: old.ClientURL, PeerURL: old.PeerURL, DataDir: dir, Etcd: e}
	c.Members[0] = m
	ctx, cancel := context.WithTimeout(t.Context(), readyTimeout)
	defer cancel()
	if err := c.waitRestored(ctx); err != nil {
		t.Fatalf("etcdtest: restored member: %v", err)
	}
}

// waitRestored waits for the restored member's readiness, a leader and a
// read with the cluster's credentials.
func (c *Cluster) waitRestored(ctx context.Context) error {
	m := c.Members[0]
	select {
	case <-m.Etcd.Server.ReadyNotify():
	case err := <-m.Etcd.Err():
		return fmt.Errorf("member %s failed: %w", m.Name, err)
	case <-ctx.Done():
		return fmt.Errorf("member %s not ready: %w", m.Name, ctx.Err())
	}
	return waitRead(ctx, c.ClientConfig())
}
