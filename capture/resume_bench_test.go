package capture

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// sevenDays stores in repo what a week of capture at a 1 s interval
// leaves behind with the default rollover (24 h) and compaction levels
// (30 s, 5 min, 1 h): seven sealed generations of 24 compacted hours
// each, and the live one, 12 hours old: 12 hours, 11 five-minute spans,
// 9 thirty-second spans and 30 segments as written, with its marker.
// Revisions are scaled down (5 per second of the simulated clock would
// be 3 million; the names and objects are what listings cost).
// It returns the live generation's id.
func sevenDays(tb testing.TB, repo *repository.Repo, t0 time.Time) string {
	tb.Helper()
	ctx := context.Background()
	enc := repository.Encoding{Compression: "zstd"}
	put := func(s *repository.Segment, key string) string {
		data, err := repository.EncodeStoredSegment(s, enc)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := repo.Store.Put(ctx, key, bytes.NewReader(data), uploader.PutOptions{}); err != nil {
			tb.Fatal(err)
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	fake := func(i int) string { sum := sha256.Sum256([]byte(fmt.Sprint(i))); return hex.EncodeToString(sum[:]) }
	var live string
	for g := range 8 {
		m := jobtest.PutBackup(tb, repo, t0.Add(time.Duration(g)*24*time.Hour), uploader.PutOptions{}, true)
		type span struct {
			level int
			d     time.Duration
			n     int
		}
		spans := []span{{3, time.Hour, 24}}
		if g == 7 {
			spans = []span{{3, time.Hour, 12}, {2, 5 * time.Minute, 11}, {1, 30 * time.Second, 9}, {0, time.Second, 30}}
		}
		rev, prev, at := m.Revision, "", m.CreatedAt
		var lastKey string
		for _, sp := range spans {
			for i := range sp.n {
				h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 0xcdf818194e3a8c32, Generation: m.ID,
					First: rev + 1, Last: rev + 1, CapturedThrough: rev + 1, CapturedAt: at.Add(sp.d), Token: 1, PrevHash: prev}
				if prev == "" {
					h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
				}
				key := repo.SegmentKey(m.ID, h.First, h.Last, enc)
				if sp.level > 0 {
					h.Format, h.Level, h.Bucket, h.EndHash = repository.CompactedFormat, sp.level, at, fake(int(rev)*10+i)
					key = repo.CompactedKey(m.ID, h.First, h.Last, sp.level, at, enc)
				}
				s := &repository.Segment{SegmentHeader: h, Revisions: []repository.Revision{{Revision: rev + 1, Received: at,
					Ops: []repository.Op{{Key: []byte("/registry/events/ns/e"), Value: bytes.Repeat([]byte("v"), 200), CreateRevision: rev + 1, Version: 1}}}}}
				stored := put(s, key)
				prev, lastKey = stored, key
				if sp.level > 0 {
					prev = h.EndHash
				}
				rev, at = rev+1, at.Add(sp.d)
			}
		}
		p := &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "cdf818194e3a8c32", SnapshotID: m.ID,
			SnapshotRevision: m.Revision, Through: rev, At: at, LastSegment: lastKey, LastHash: prev, Token: 1}
		if g < 7 {
			p.Sealed, p.SealReason = true, string(SealRollover)
		}
		if _, err := repo.PutProgress(ctx, p); err != nil {
			tb.Fatal(err)
		}
		live = m.ID
	}
	return live
}

// BenchmarkSevenDayWindow: what an agent's resume (capture continuing
// the live generation: the store's backups, every window, the newest
// marker and the chain head) and `lifeboat list` cost on versitygw with
// a simulated week of capture at 1 s (the target: 2 s each).
// With LIFEBOAT_BIN set it also runs the binary's list.
func BenchmarkSevenDayWindow(b *testing.B) {
	srv := s3test.Start(b)
	st, bucket := jobtest.NewS3Store(b, srv, false)
	repo := repository.New(st, "bench")
	live := sevenDays(b, repo, time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC))
	r := &runner{job: Job{Repo: repo, Token: func() (int64, bool) { return 1, true }}, lg: slog.New(slog.DiscardHandler)}
	b.Run("resume", func(b *testing.B) {
		for b.Loop() {
			g, err := r.resume(b.Context())
			if err != nil || g == nil || g.id != live {
				b.Fatalf("resume: %v, %v; want generation %s", g, err, live)
			}
		}
	})
	bin := os.Getenv("LIFEBOAT_BIN")
	if bin == "" {
		return
	}
	b.Run("lifeboat-list", func(b *testing.B) {
		for b.Loop() {
			cmd := exec.Command(bin, "list", "--store", "s3://"+bucket+"/team", "--cluster", "bench", "--s3-endpoint", srv.Endpoint,
				"--s3-region", srv.Region, "--s3-path-style")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Run(); err != nil || !strings.Contains(out.String(), live) {
				b.Fatalf("lifeboat list: %v\n%s", err, out.String())
			}
		}
	})
}
