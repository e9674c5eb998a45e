package main

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// BenchmarkLog reads a window of 20 segments of 2 000 revisions, each a
// PUT of a 2 KiB random value under a Kubernetes-like key, with a prefix
// that matches one key in 100: the cost of scanning a window with
// lifeboat log (reading and decoding every segment), in revisions/s.
func BenchmarkLog(b *testing.B) {
	f := newPruneFixture(b)
	cfg := DefaultConfig()
	cfg.Cluster = "c"
	cfg.Store.URL = "file://" + f.dir
	repo := f.backups
	const segs, per = 20, 2000
	snap := int64(1000)
	m := f.backup(b, changesT0, snap)
	rnd := rand.New(rand.NewPCG(1, 2))
	prev := ""
	for i := range segs {
		first := snap + 1 + int64(i*per)
		s := &repository.Segment{SegmentHeader: repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
			First: first, Last: first + per - 1, CapturedThrough: first + per - 1, CapturedAt: changesT0, Token: 1, PrevHash: prev}}
		if i == 0 {
			s.SnapshotID, s.SnapshotRevision = m.ID, snap
		}
		for r := first; r < first+per; r++ {
			v := make([]byte, 2048)
			for j := range v {
				v[j] = byte(rnd.Uint32())
			}
			s.Revisions = append(s.Revisions, repository.Revision{Revision: r, Received: changesT0.Add(time.Duration(r) * time.Millisecond),
				Ops: []repository.Op{{Key: fmt.Appendf(nil, "/registry/pods/ns-%d/pod-%d", r%100, r), Value: v, CreateRevision: r, Version: 1}}})
		}
		_, hash, err := repo.PutSegment(b.Context(), s, repository.Encoding{Compression: "zstd"})
		if err != nil {
			b.Fatal(err)
		}
		prev = hash
	}
	b.ResetTimer()
	for b.Loop() {
		if err := runLog(b.Context(), &cfg, slog.New(slog.DiscardHandler), logOptions{prefix: "/registry/pods/ns-7/", output: "table"}, io.Discard, changesT0); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(segs*per)*float64(b.N)/b.Elapsed().Seconds(), "revisions/s")
}
