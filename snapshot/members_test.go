package snapshot_test

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// clusterID returns c's cluster ID as etcdctl prints it (hex).
func clusterID(c *etcdtest.Cluster) string {
	return c.Members[0].Etcd.Server.Cluster().ID().String()
}

func TestMembersTwoClusters(t *testing.T) {
	a := etcdtest.Start(t, etcdtest.Options{Members: 1})
	b := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cfg := configFor(a)
	cfg.Endpoints = append(cfg.Endpoints, b.Endpoints()...)
	_, err := members(t.Context(), cfg)
	if !errors.Is(err, snapshot.ErrMixedClusters) {
		t.Fatalf("Members over two clusters: err = %v, want ErrMixedClusters", err)
	}
	wants := append([]string{clusterID(a), clusterID(b), "--endpoints"}, cfg.Endpoints...)
	checkErr(t, err, wants)

	spool := filepath.Join(t.TempDir(), "snap.db")
	_, err = take(t.Context(), cfg, spool, nil, snapshot.Options{}, nil)
	if !errors.Is(err, snapshot.ErrMixedClusters) {
		t.Errorf("Take over two clusters: err = %v, want ErrMixedClusters", err)
	}
	checkNoSpool(t, spool)

	// An unreachable endpoint does not count as a cluster of its own.
	stopped := b.Members[2]
	stopped.Stop()
	cfg = configFor(b)
	if _, err := members(t.Context(), cfg); err != nil {
		t.Errorf("Members with one member down: %v", err)
	}
}

// loneSurvivor stops all members of a 3-member cluster but the first and
// waits until the survivor sees no leader.
func loneSurvivor(t *testing.T, c *etcdtest.Cluster) *etcdtest.Member {
	t.Helper()
	survivor := c.Members[0]
	c.Members[1].Stop()
	c.Members[2].Stop()
	deadline := time.Now().Add(60 * time.Second)
	for survivor.Etcd.Server.Leader() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s still sees leader %s with both peers stopped", survivor.Name, survivor.Etcd.Server.Leader())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return survivor
}

func TestTakeLoneSurvivor(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	fill(t, c, 20, 1000)
	survivor := loneSurvivor(t, c)
	cfg := configFor(c)

	sts, err := members(t.Context(), cfg)
	if err != nil {
		t.Fatalf("Members: %v", err)
	}
	if sts[0].Endpoint != survivor.ClientURL || sts[0].Err != nil || sts[0].LeaderID != 0 {
		t.Errorf("first member %s (err %v) reports leader %x, want the survivor %s with leader 0",
			sts[0].Endpoint, sts[0].Err, sts[0].LeaderID, survivor.ClientURL)
	}

	t.Run("not by default", func(t *testing.T) {
		spool := filepath.Join(t.TempDir(), "snap.db")
		lg, logs := testLogger()
		_, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, lg)
		if !errors.Is(err, snapshot.ErrNoLeader) {
			t.Fatalf("Take of a member without leader: err = %v, want ErrNoLeader", err)
		}
		checkErr(t, err, []string{survivor.ClientURL, "--member " + survivor.ClientURL})
		checkNoSpool(t, spool)
		if !strings.Contains(logs.String(), "sees no leader") {
			t.Errorf("no log line about the member without leader:\n%s", logs)
		}
	})
	t.Run("named with --member", func(t *testing.T) {
		cfg := cfg
		cfg.Member = survivor.ClientURL
		spool := filepath.Join(t.TempDir(), "snap.db")
		info, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, nil)
		if err != nil {
			t.Fatalf("Take --member %s: %v", survivor.ClientURL, err)
		}
		if info.Endpoint != survivor.ClientURL {
			t.Errorf("snapshot from %s, want %s", info.Endpoint, survivor.ClientURL)
		}
		checkSpool(t, spool, info.Size, info.SHA256)
	})
}

// TestLiveHashKVCompacted: a member that compacted past the revision is the
// one legitimate reason a live comparison cannot be made, and says so with
// ErrCompacted; other failures are plain errors.
func TestLiveHashKVCompacted(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	fill(t, c, 10, 100)
	cli := c.Client(t)
	resp, err := cli.Get(t.Context(), "/fill/")
	if err != nil {
		t.Fatal(err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(t.Context(), rev); err != nil {
		t.Fatal(err)
	}
	cfg := configFor(c)
	_, _, err = liveHashKV(t.Context(), cfg, c.Members[0].ClientURL, rev-1)
	if !errors.Is(err, snapshot.ErrCompacted) {
		t.Errorf("HashKV below the compact revision: err = %v, want ErrCompacted", err)
	}
	dead := cfg
	dead.Endpoints = []string{"http://127.0.0.1:1"}
	_, _, err = liveHashKV(t.Context(), dead, dead.Endpoints[0], rev)
	if err == nil || errors.Is(err, snapshot.ErrCompacted) {
		t.Errorf("HashKV of an unreachable member: err = %v, want an error other than ErrCompacted", err)
	}
}

// TestTakeLoneSurvivorAuth: etcd's user/password login is a raft request,
// so without quorum it cannot succeed; the error says so and what to use
// instead.
func TestTakeLoneSurvivorAuth(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3, TLS: true, Auth: true})
	survivor := loneSurvivor(t, c)
	cfg := configFor(c)
	cfg.Member = survivor.ClientURL
	spool := filepath.Join(t.TempDir(), "snap.db")
	_, err := take(t.Context(), cfg, spool, nil, snapshot.Options{}, nil)
	t.Logf("err: %v", err)
	checkErr(t, err, []string{survivor.ClientURL, "quorum", "client certificate"}, c.Password)
	checkNoSpool(t, spool)
}
