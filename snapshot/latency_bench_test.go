package snapshot_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// BenchmarkPutLatencyDuringSnapshot measures what a snapshot does to etcd's
// write latency when the spool file shares etcd's disk: a durable (fsyncing)
// member takes a steady stream of puts while snapshots are written next to
// its data directory, and the p50/p99/max put latency is reported for Take
// with incremental writeback, Take without it, and etcdctl's
// SaveWithVersion. Timings on a shared machine are noisy: compare the
// variants of one run, and run it more than once.
func BenchmarkPutLatencyDuringSnapshot(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{Members: 1, Durable: true})
	if _, err := seed.Kubernetes(context.Background(), c.Client(b), seed.Options{Objects: 20000, Seed: 1}); err != nil {
		b.Fatalf("seed: %v", err)
	}
	cfg := configFor(c)
	// The spool lives on the same file system as the member's data.
	dir := filepath.Join(filepath.Dir(c.Members[0].DataDir), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	cc := c.ClientConfig()
	cc.Endpoints = cc.Endpoints[:1]
	variants := []struct {
		name string
		save func(ctx context.Context, path string) error
	}{
		{name: "lifeboat", save: func(ctx context.Context, path string) error {
			_, err := take(ctx, cfg, path, nil, snapshot.Options{}, nil)
			return err
		}},
		{name: "lifeboat-nowriteback", save: func(ctx context.Context, path string) error {
			_, err := take(ctx, cfg, path, nil, snapshot.Options{Chunk: -1}, nil)
			return err
		}},
		{name: "etcdctl", save: func(ctx context.Context, path string) error {
			_, err := clientsnapshot.SaveWithVersion(ctx, zap.NewNop(), cc, path)
			return err
		}},
	}
	cli := c.Client(b)
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			reportPutLatency(b, cli, func() {
				path := filepath.Join(dir, "snap.db")
				if err := v.save(b.Context(), path); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// reportPutLatency runs about 200 puts/s through cli while it calls run
// once per benchmark iteration, and reports the puts' p50, p99 and maximum
// latency.
func reportPutLatency(b *testing.B, cli *clientv3.Client, run func()) {
	ctx, cancel := context.WithCancel(b.Context())
	var (
		mu  sync.Mutex
		lat []time.Duration
		wg  sync.WaitGroup
	)
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond) // about 200 puts/s
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			start := time.Now()
			if _, err := cli.Put(ctx, fmt.Sprintf("/latency/%d", i%1000), "x"); err != nil {
				return
			}
			mu.Lock()
			lat = append(lat, time.Since(start))
			mu.Unlock()
		}
	})
	for b.Loop() {
		run()
	}
	cancel()
	wg.Wait()
	if len(lat) == 0 {
		b.Fatal("no puts completed")
	}
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-put-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-put-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-put-ms")
}

// BenchmarkPutLatencyHashKV measures what the live HashKV's member choice
// does to the leader's write latency in a 3-member cluster (durable
// members on one disk, puts on the leader): the snapshot is taken from a
// follower, then HashKV is asked of that same follower, of the other
// follower (lifeboat's choice, snapshot.HashKVMember), or of the leader; and
// "none" takes the snapshot alone. etcd blocks writes on the member while it
// hashes, which the leader's clients feel only when the leader hashes.
func BenchmarkPutLatencyHashKV(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{Members: 3, Durable: true})
	if _, err := seed.Kubernetes(context.Background(), c.Client(b), seed.Options{Objects: 20000, Seed: 1}); err != nil {
		b.Fatalf("seed: %v", err)
	}
	cfg := configFor(c)
	dir := filepath.Join(filepath.Dir(c.Members[0].DataDir), "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	leader := c.Leader(b)
	var fs []string
	for _, m := range c.Members {
		if m != leader {
			fs = append(fs, m.ClientURL)
		}
	}
	lcc := c.ClientConfig()
	lcc.Endpoints = []string{leader.ClientURL}
	cli, err := clientv3.New(lcc)
	if err != nil {
		b.Fatal(err)
	}
	defer cli.Close()
	snapCfg := cfg
	snapCfg.Member = fs[0]
	for _, v := range []struct{ name, hashKV string }{
		{"none", ""}, {"same-follower", fs[0]}, {"other-follower", fs[1]}, {"leader", leader.ClientURL},
	} {
		b.Run(v.name, func(b *testing.B) {
			reportPutLatency(b, cli, func() {
				path := filepath.Join(dir, "snap.db")
				if _, err := take(b.Context(), snapCfg, path, nil, snapshot.Options{}, nil); err != nil {
					b.Fatal(err)
				}
				if v.hashKV != "" {
					if _, _, err := liveHashKV(b.Context(), cfg, v.hashKV, 0); err != nil {
						b.Fatal(err)
					}
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
	if now := c.Leader(b); now != leader {
		b.Logf("leadership moved from %s to %s during the run: discard it", leader.Name, now.Name)
	}
}
