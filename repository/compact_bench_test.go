package repository_test

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkCompactMemory compacts one busy span, 64 MiB of raw changes
// in 16 segments of 4 MiB (1–2 KiB values, as a burst of Kubernetes
// writes; zstd, a directory store), under each bound of a compacted
// segment's raw size, and reports the heap it takes: peak-heap-MiB is
// the largest heap of live and not yet collected objects while it runs
// (sampled every 200 µs, the GC at 10 % so that it tracks the live heap),
// base-MiB the heap before it. The bound is MaxBytes: the heap grows
// with it, not with the span (capture ties it to its buffer: 16 MiB by
// default).
func BenchmarkCompactMemory(b *testing.B) {
	for _, mb := range []int64{8, 16, 64} {
		b.Run(fmt.Sprintf("max-%dMiB", mb), func(b *testing.B) {
			benchCompactMemory(b, mb<<20)
		})
	}
}

func benchCompactMemory(b *testing.B, maxBytes int64) {
	repo := dirBackups(b, b.TempDir())
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(b, repo, t0, uploader.PutOptions{}, true)
	enc := repository.Encoding{Compression: "zstd"}
	putBusySpan(b, repo, m, enc, 16, 4<<20)
	l, err := repo.List(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	ws, err := repo.Windows(b.Context(), l)
	if err != nil || len(ws) != 1 {
		b.Fatalf("windows %v, %v: want one", ws, err)
	}
	st := repository.CompactStep{Generation: m.ID, Level: 1, Bucket: t0, Sources: ws[0].Segments}
	p := repository.CompactPolicy{Levels: []time.Duration{time.Hour}, MaxBytes: maxBytes}
	defer debug.SetGCPercent(debug.SetGCPercent(10))
	var peak, base float64
	b.ResetTimer()
	for range b.N {
		runtime.GC()
		base = heapObjects()
		stop := sampleHeap(&peak)
		out, err := repo.Compact(b.Context(), st, p, enc, nil)
		stop()
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		for _, si := range out {
			if err := repo.Store.Delete(b.Context(), si.Object.Key); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(peak/(1<<20), "peak-heap-MiB")
	b.ReportMetric(base/(1<<20), "base-MiB")
}

// putBusySpan stores n linked segments of about size raw bytes each
// after m's snapshot, 1–2 KiB random values over 5 000 keys.
func putBusySpan(b *testing.B, repo *repository.Repo, m *repository.Manifest, enc repository.Encoding, n int, size int64) {
	rng := rand.New(rand.NewPCG(1, 2))
	rev, prev := m.Revision, ""
	for i := range n {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID, First: rev + 1,
			Token: 1, PrevHash: prev, CapturedAt: chainT0.Add(time.Duration(i) * time.Second)}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		s := &repository.Segment{SegmentHeader: h}
		for raw := int64(0); raw < size; {
			rev++
			v := make([]byte, 1024+rng.IntN(1024))
			for j := range v {
				v[j] = byte('a' + rng.IntN(16))
			}
			key := fmt.Appendf(nil, "/registry/pods/default/p%d", rng.IntN(5000))
			s.Revisions = append(s.Revisions, repository.Revision{Revision: rev, Received: h.CapturedAt,
				Ops: []repository.Op{{Key: key, Value: v, CreateRevision: 1, Version: 2}}})
			raw += int64(len(key) + len(v) + 32)
		}
		s.Last, s.CapturedThrough = rev, rev
		_, hash, err := repo.PutSegment(b.Context(), s, enc)
		if err != nil {
			b.Fatal(err)
		}
		prev = hash
	}
}

// heapObjects is the heap's live and not yet swept objects (bytes).
func heapObjects() float64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64())
}

// sampleHeap records the largest heapObjects into *peak until stopped.
func sampleHeap(peak *float64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			*peak = max(*peak, heapObjects())
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
