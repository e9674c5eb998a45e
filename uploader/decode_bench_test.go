package uploader

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"filippo.io/age"
)

// BenchmarkDecode decodes a zstd+age object as a drill or a restore does,
// with the decoder's concurrency at 1 and at its default, and reports the
// peak heap. LIFEBOAT_BENCH_SNAPSHOT=file encodes that file (e.g. the
// bench's 1.1 GB snapshot); the default is 64 MiB of compressible bytes.
//
//	go test -run '^$' -bench Decode -benchmem ./uploader
func BenchmarkDecode(b *testing.B) {
	var raw []byte
	if p := os.Getenv("LIFEBOAT_BENCH_SNAPSHOT"); p != "" {
		var err error
		if raw, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	} else {
		t := &testing.T{}
		raw = rawSnapshot(t, 64<<20)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	var enc bytes.Buffer
	w, err := NewEncoder(&enc, Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	obj := enc.Bytes()
	saved := decoderConcurrency
	b.Cleanup(func() { decoderConcurrency = saved })
	for _, c := range []int{1, 0} {
		b.Run(fmt.Sprintf("concurrency=%d", c), func(b *testing.B) {
			decoderConcurrency = c
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(raw)))
			b.ResetTimer()
			var peak uint64
			for b.Loop() {
				stop := peakHeap()
				r, err := NewDecoder(bytes.NewReader(obj), "zstd", "age", []age.Identity{id})
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, r, buf)
				r.Close()
				peak = max(peak, stop())
				if err != nil || n != int64(len(raw)) {
					b.Fatalf("decoded %d bytes of %d: %v", n, len(raw), err)
				}
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

// peakHeap samples the heap's object bytes every 2 ms until the returned
// function is called, which reports the peak above the first sample.
func peakHeap() func() uint64 {
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	wg.Go(func() {
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			metrics.Read(sample)
			peak = max(peak, sample[0].Value.Uint64())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() uint64 {
		close(done)
		wg.Wait()
		return peak - min(peak, base)
	}
}
