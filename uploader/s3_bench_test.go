package uploader_test

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkS3Put streams 256 MiB of compressible, etcd-like data through
// Put to versitygw with the default part size and concurrency, and reports
// throughput (MB/s) and peak memory: the Go heap sampled while the upload
// runs, and the process's peak RSS (VmHWM, reset before the first
// iteration where the kernel allows it).
func BenchmarkS3Put(b *testing.B) {
	const size = 256 << 20
	srv := s3test.Start(b)
	srv.Env(b)
	bucket := newBucket(b, srv, false)
	s := newS3(b, uploader.S3Config{
		Bucket: bucket, Prefix: "bench", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true,
	})

	runtime.GC()
	jobtest.ClearHWM()
	stop := sampleHeap()
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Put(b.Context(), "obj", newEtcdLikeReader(size), uploader.PutOptions{}); err != nil {
			b.Fatalf("Put: %v", err)
		}
		// Put never replaces an object.
		b.StopTimer()
		if err := s.Delete(b.Context(), "obj"); err != nil {
			b.Fatalf("Delete: %v", err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	peakHeap := stop()
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	if hwm, err := jobtest.VmHWM(); err == nil {
		b.ReportMetric(float64(hwm)/(1<<20), "VmHWM-MiB")
	}
}

// sampleHeap samples the bytes of heap objects (live and not yet collected)
// every few milliseconds until the returned function is called, which
// reports the peak.
func sampleHeap() func() uint64 {
	const name = "/memory/classes/heap/objects:bytes"
	done := make(chan struct{})
	var wg sync.WaitGroup
	var peak uint64
	wg.Go(func() {
		sample := []metrics.Sample{{Name: name}}
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
		return peak
	}
}

// newEtcdLikeReader returns n bytes of text shaped like Kubernetes objects in
// etcd (compresses about 5:1 with zstd, like the real thing), from a 1 MiB
// block repeated with a changing counter, so memory stays constant.
func newEtcdLikeReader(n int64) io.Reader {
	var block bytes.Buffer
	for i := 0; block.Len() < 1<<20; i++ {
		fmt.Fprintf(&block, `/registry/pods/ns-%03d/pod-%06d {"kind":"Pod","apiVersion":"v1","metadata":{"name":"pod-%06d","namespace":"ns-%03d","uid":"%08x-0000-4000-8000-%012x","resourceVersion":"%d","labels":{"app":"svc-%d","tier":"backend"}},"spec":{"nodeName":"node-%02d","containers":[{"name":"main","image":"registry.example.com/svc-%d:v1.%d.%d"}]},"status":{"phase":"Running","podIP":"10.%d.%d.%d"}}`+"\n",
			i%200, i, i, i%200, i*2654435761, i*40503, 100000+i, i%50, i%20, i%50, i%7, i%13, i%250, (i/250)%250, i%250)
	}
	return io.LimitReader(&repeatReader{block: block.Bytes()}, n)
}

type repeatReader struct {
	block []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p, r.block[r.off:])
	r.off = (r.off + n) % len(r.block)
	return n, nil
}
