package capture

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCompactDamageNotRetried: a damaged segment inside a compaction
// step is proven damage, not a transient failure: the pass records it,
// logs it once as an error naming it and is no failed pass; the next
// passes leave it alone (no error, nothing logged again) and compact
// what lies before it.
func TestCompactDamageNotRetried(t *testing.T) {
	dir := t.TempDir()
	st, err := uploader.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: "c"}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	enc := repository.Encoding{Compression: "zstd"}
	var keys []string
	prev := ""
	for i := range int64(8) {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
			First: m.Revision + 1 + i, Last: m.Revision + 1 + i, CapturedThrough: m.Revision + 1 + i, CapturedAt: t0, Token: 1, PrevHash: prev}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		s := &repository.Segment{SegmentHeader: h, Revisions: []repository.Revision{{Revision: h.First, Received: t0,
			Ops: []repository.Op{{Key: []byte("/k"), Value: []byte("v"), CreateRevision: m.Revision + 1, Version: i + 1}}}}}
		o, hash, err := b.PutSegment(t.Context(), s, enc)
		if err != nil {
			t.Fatal(err)
		}
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		if err := os.Chtimes(filepath.Join(dir, filepath.FromSlash(o.Key)), at, at); err != nil {
			t.Fatal(err)
		}
		keys, prev = append(keys, o.Key), hash
	}
	bad := keys[4]
	p := filepath.Join(dir, filepath.FromSlash(bad))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if at := t0.Add(40 * time.Second); os.Chtimes(p, at, at) != nil {
		t.Fatal("chtimes")
	}
	var logs bytes.Buffer
	stats := &Stats{}
	pol := repository.CompactPolicy{Levels: []time.Duration{time.Minute}, Settle: time.Second, Grace: time.Minute}
	r := &runner{
		job: Job{Repo: b, Encoding: enc, Compact: pol, Stats: stats, Now: func() time.Time { return t0.Add(5 * time.Minute) },
			Token: func() (int64, bool) { return 1, true }},
		lg: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	locks := &compactLocks{extended: map[string]bool{}, damaged: map[string]bool{}}
	for pass := range 3 {
		if err := r.compactOnce(t.Context(), pol.WithDefaults(), locks); err != nil {
			t.Fatalf("pass %d: %v, want no failed pass for proven damage", pass, err)
		}
	}
	if n := strings.Count(logs.String(), "damaged change segment"); n != 1 || !strings.Contains(logs.String(), bad) || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("logged %d times, want once as an error naming %s:\n%s", n, bad, logs.String())
	}
	if stats.Compacted.Load() == 0 {
		t.Error("nothing compacted: what lies before the damage should be")
	}
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if d := l.DamageOf(bad); d == nil || d.FoundBy != repository.FoundByCompaction {
		t.Errorf("damage not recorded: %+v", l.Damage)
	}
}
