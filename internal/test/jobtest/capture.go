package jobtest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// SevenDaysOfCapture stores in repo what a week of capture at a 1 s interval
// leaves behind with the default rollover (24 h) and compaction levels
// (30 s, 5 min, 1 h): seven sealed generations of 24 compacted hours
// each, and the live one, 12 hours old: 12 hours, 11 five-minute spans,
// 9 thirty-second spans and 30 segments as written, with its marker.
// Revisions are scaled down (5 per second of the simulated clock would
// be 3 million; the names and objects are what listings cost).
// It returns the live generation's id.
func SevenDaysOfCapture(tb testing.TB, repo *repository.Repo, t0 time.Time) string {
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
		m := PutBackup(tb, repo, t0.Add(time.Duration(g)*24*time.Hour), uploader.PutOptions{}, true)
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
			p.Sealed, p.SealReason = true, "rollover" // capture.SealRollover
		}
		if _, err := repo.PutProgress(ctx, p); err != nil {
			tb.Fatal(err)
		}
		live = m.ID
	}
	return live
}
