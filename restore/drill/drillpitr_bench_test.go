package drill_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"sync"
	"testing"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// BenchmarkPointInTimeDrill drills a point-in-time restore against the
// live etcd it was captured from: a 2 000-object snapshot (1-4 KiB
// values; LIFEBOAT_BENCH_PITR_OBJECTS sets another number), then 20 000
// revisions of Kubernetes-like updates captured in 2 000-revision
// segments (zstd and age), replayed to the last one. It
// reports the replay's rate and the phases' seconds (replay-s, restore-s,
// boot-s, checks-s; the sum is the recovery time), once under the agent's
// soft memory limit (soft-limit: debug.SetMemoryLimit(32 MiB), as the
// daemon sets it for a local store) and once without (no-limit: as a
// one-shot lifeboat drill --to-revision lifts it).
func BenchmarkPointInTimeDrill(b *testing.B) {
	ctx := b.Context()
	c := etcdtest.Start(b, etcdtest.Options{})
	cli := c.Client(b)
	id := restoretest.NewIdentity(b)
	enc := restoretest.AgeEncoding(id)
	repo := restoretest.DirRepo(b, b.TempDir())
	value := func(r *rand.Rand) string {
		v := make([]byte, 1024+r.IntN(3072))
		for i := range v {
			v[i] = byte('a' + r.IntN(26))
		}
		return string(v)
	}
	const revisions, writers = 20000, 8
	objects := 2000
	if v := os.Getenv("LIFEBOAT_BENCH_PITR_OBJECTS"); v != "" {
		// A larger keyspace: the replay's live heap (etcd's key index)
		// grows with it, and with it what a soft limit costs.
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("LIFEBOAT_BENCH_PITR_OBJECTS=%q: want a positive number of objects", v)
		}
		objects = n
	}
	key := func(i int) string { return fmt.Sprintf("/registry/pods/ns%02d/pod-%07d", i%40, i) }
	var seed sync.WaitGroup
	for w := range writers {
		seed.Go(func() {
			rnd := rand.New(rand.NewPCG(1, uint64(w)))
			for i := w; i < objects; i += writers {
				if _, err := cli.Put(ctx, key(i), value(rnd)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	seed.Wait()
	if b.Failed() {
		b.FailNow()
	}
	anchor := (&restoretest.Source{C: c}).Backup(b, repo, enc)
	capture := changetest.Start(b, changetest.Options{Client: cli, Repo: repo, Anchor: anchor, Encoding: enc, SegmentRevisions: 2000})
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 9))
			for range revisions / writers {
				if _, err := cli.Put(ctx, key(r.IntN(objects)), value(r)); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	through := capture.Sync(b)
	l, err := repo.List(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ids := []age.Identity{id}
	p, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Revision: through}, ids)
	if err != nil {
		b.Fatal(err)
	}
	live := liveSession(b, c.Endpoints())
	for _, bc := range []struct {
		name  string
		limit int64
	}{
		{"soft-limit", agentSoftLimit},
		{"no-limit", math.MaxInt64},
	} {
		b.Run(bc.name, func(b *testing.B) {
			old := debug.SetMemoryLimit(bc.limit)
			defer debug.SetMemoryLimit(old)
			// This process's live heap (the live etcd it drills against
			// included): above the limit, its every allocation makes the
			// GC mark all of it.
			runtime.GC()
			heap := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
			metrics.Read(heap)
			phases := map[string]float64{}
			var rate float64
			for b.Loop() {
				d, err := drill.RunAndStore(ctx, drill.Options{Backups: repo, Identities: ids, ScratchDir: b.TempDir(),
					PointInTime: &drill.PointInTimeOptions{Plan: p, Live: live}})
				if err != nil {
					b.Fatal(err)
				}
				for _, ph := range d.Report.Phases {
					phases[ph.Name] += ph.Seconds
				}
				rate += d.Report.PointInTime.RevisionsPerSecond
			}
			n := float64(b.N)
			b.ReportMetric(float64(heap[0].Value.Uint64())/(1<<20), "heap-live-MiB")
			b.ReportMetric(rate/n, "revisions/s")
			for _, name := range []string{drill.PhaseReplay, drill.PhaseRestore, drill.PhaseBoot, drill.PhaseChecks} {
				b.ReportMetric(phases[name]/n, name+"-s")
			}
		})
	}
}

// agentSoftLimit is the Go runtime's soft memory limit in the agent with
// a local store: lifeboat's 32 MiB headroom and no store buffers
// (cmd/lifeboat's setMemoryLimit).
const agentSoftLimit = 32 << 20
