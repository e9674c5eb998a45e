package repository

import (
	"bytes"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
)

// BenchmarkEncodeLevers encodes a snapshot with zstd and age as a backup
// does (NewEncoder's options, zstdOptions), beside one lever changed at a
// time: no entropy coding, a 256 KiB or a 4 MiB window, the encoder's
// lower-memory mode, two threads. It reports the CPU seconds per GB of
// raw bytes (getrusage: every thread, the GC's too), the wall seconds per
// GB and the output's share of the raw size, so a lever's CPU, wall and
// size are read side by side. LIFEBOAT_BENCH_SNAPSHOT=file reads up to
// 256 MiB of that file (e.g. a bench-scale database); the default is
// 64 MiB of compressible bytes.
//
//	LIFEBOAT_BENCH_SNAPSHOT=/var/tmp/lifeboat-scale/1GB/etcd/member/snap/db \
//	  go test -run '^$' -bench EncodeLevers -benchtime 3x ./repository
func BenchmarkEncodeLevers(b *testing.B) {
	raw := benchRaw(b, 256<<20)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range []struct {
		name string
		opts []zstd.EOption
	}{
		{"default", nil},
		{"no-entropy", []zstd.EOption{zstd.WithNoEntropyCompression(true)}},
		{"window-256KiB", []zstd.EOption{zstd.WithWindowSize(256 << 10)}},
		{"window-4MiB", []zstd.EOption{zstd.WithWindowSize(4 << 20)}},
		{"lower-mem", []zstd.EOption{zstd.WithLowerEncoderMem(true)}},
		{"concurrency-2", []zstd.EOption{zstd.WithEncoderConcurrency(2)}},
	} {
		b.Run(l.name, func(b *testing.B) {
			var out countWriter
			cpu0, t0 := cpuSeconds(b), time.Now()
			for b.Loop() {
				out = 0
				aw, err := age.Encrypt(&out, id.Recipient())
				if err != nil {
					b.Fatal(err)
				}
				zw, err := zstd.NewWriter(aw, append(zstdOptions(), l.opts...)...)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(zw, bytes.NewReader(raw)); err != nil {
					b.Fatal(err)
				}
				if err := zw.Close(); err != nil {
					b.Fatal(err)
				}
				if err := aw.Close(); err != nil {
					b.Fatal(err)
				}
			}
			gb := float64(len(raw)) * float64(b.N) / 1e9
			b.ReportMetric((cpuSeconds(b)-cpu0)/gb, "cpu-s/GB")
			b.ReportMetric(time.Since(t0).Seconds()/gb, "wall-s/GB")
			b.ReportMetric(100*float64(out)/float64(len(raw)), "%size")
		})
	}
}

type countWriter int64

func (c *countWriter) Write(p []byte) (int, error) { *c += countWriter(len(p)); return len(p), nil }

// benchRaw is up to max bytes of $LIFEBOAT_BENCH_SNAPSHOT, or 64 MiB of
// compressible bytes.
func benchRaw(b *testing.B, max int) []byte {
	p := os.Getenv("LIFEBOAT_BENCH_SNAPSHOT")
	if p == "" {
		return rawSnapshot(&testing.T{}, 64<<20)
	}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	raw := make([]byte, max)
	n, err := io.ReadFull(f, raw)
	if err != nil && err != io.ErrUnexpectedEOF {
		b.Fatal(err)
	}
	return raw[:n]
}

func cpuSeconds(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
