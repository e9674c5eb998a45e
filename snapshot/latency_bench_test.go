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

	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/seed"
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
			_, err := snapshot.Take(ctx, cfg, path, nil, snapshot.Options{}, nil)
			return err
		}},
		{name: "lifeboat-nowriteback", save: func(ctx context.Context, path string) error {
			_, err := snapshot.Take(ctx, cfg, path, nil, snapshot.Options{Chunk: -1}, nil)
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
				path := filepath.Join(dir, "snap.db")
				if err := v.save(b.Context(), path); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
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
		})
	}
}
