package repository_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// deleteVersion deletes the current version of key (under the store's
// prefix "team") by its VersionId, with the bucket's own credentials: in
// a versioned bucket only that really deletes, and Object Lock refuses it.
func deleteVersion(t *testing.T, srv *s3test.Server, bucket, key string) error {
	t.Helper()
	c := srv.Client(t)
	head, err := c.HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String("team/" + key)})
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	_, err = c.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String("team/" + key), VersionId: head.VersionId})
	return err
}

// TestLockPolicyLocksEveryWrite: with a LockPolicy, every object a Repo
// writes is locked in COMPLIANCE mode for its kind's period: a manifest,
// a drill report, a sealed marker and a segment of the highest level for
// the retain period; a level-0 segment and an unsealed marker for what
// compaction needs (SegmentFor(0)); and none of them can be deleted by
// version with the bucket's credentials. A segment that stays on its
// window's path past its short lock is extended to the retain period.
func TestLockPolicyLocksEveryWrite(t *testing.T) {
	srv := s3test.Start(t)
	st, bucket := jobtest.NewS3Store(t, srv, true)
	b := repository.New(st, "prod")
	compact := repository.CompactPolicy{Levels: []time.Duration{30 * time.Second}, Grace: time.Minute}
	b.Lock = repository.LockPolicy{
		Retention:  uploader.Retention{Mode: uploader.LockCompliance, For: time.Hour},
		Compaction: compact,
	}
	ctx := t.Context()
	start := time.Now()

	m := jobtest.PutBackup(t, b, start.Add(-time.Minute), b.Lock.Options("application/octet-stream"), false)
	report := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: m.ID, Cluster: b.Cluster,
		StartedAt: start, FinishedAt: start.Add(time.Second), Passed: true, AgentVersion: "test"}
	if err := b.PutDrillReport(ctx, report); err != nil {
		t.Fatal(err)
	}
	segs := chainSegments()
	var keys []string
	prev := ""
	for _, s := range segs {
		if prev != "" {
			s.PrevHash = prev
		}
		o, h, err := b.PutSegment(ctx, s, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatal(err)
		}
		keys, prev = append(keys, o.Key), h
	}
	last := segs[len(segs)-1]
	marker := func(sealed bool) string {
		p := &repository.Progress{Format: repository.ProgressFormat, Generation: last.Generation, ClusterID: "2a",
			SnapshotID: "20261201T100000Z-r8", SnapshotRevision: 8, Through: last.Last, At: time.Now().UTC(),
			LastSegment: keys[len(keys)-1], LastHash: prev, Token: 3, Sealed: sealed}
		if sealed {
			p.SealReason = "test"
		}
		k, err := b.PutProgress(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	unsealed, sealed := marker(false), marker(true)

	long, short := time.Hour, b.Lock.SegmentFor(0)
	want := map[string]time.Duration{
		m.Object: long, b.ManifestKey(m.ID): long, b.DrillReportKey(m.ID, start): long, sealed: long,
		unsealed: short, keys[0]: short, keys[1]: short, keys[2]: short,
	}
	if short >= long || short < compact.Levels[0]+compact.Grace {
		t.Fatalf("SegmentFor(0) = %s: want between the span plus the grace and the retain period", short)
	}
	for key, d := range want {
		info, err := st.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.LockMode != uploader.LockCompliance {
			t.Errorf("%s: lock mode %q, want COMPLIANCE", key, info.LockMode)
		}
		if lo, hi := start.Add(d-2*time.Second), time.Now().Add(d+time.Second); info.RetainUntil.Before(lo) || info.RetainUntil.After(hi) {
			t.Errorf("%s: retain until %s, want %s from when it was written", key, info.RetainUntil, d)
		}
		if err := deleteVersion(t, srv, bucket, key); err == nil {
			t.Errorf("%s: deleted by version with the bucket's credentials despite its COMPLIANCE lock", key)
		}
	}

	// Compaction left the first segment on the path long past its due
	// time: its lock is extended to the retain period from its write.
	info, err := st.Stat(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	b.Lock.Now = func() time.Time { return time.Now().Add(short) }
	w := repository.Window{Segments: []repository.SegmentInfo{{Object: info}}}
	if n, err := b.ExtendStayers(ctx, w, nil); err != nil || n != 1 {
		t.Fatalf("ExtendStayers = %d, %v; want 1 extended", n, err)
	}
	got, err := st.Stat(ctx, keys[0])
	if err != nil {
		t.Fatal(err)
	}
	if wantUntil := info.ModTime.Add(long).Truncate(time.Second); got.RetainUntil.Before(wantUntil) {
		t.Errorf("stayer %s: retain until %s after extension, want %s", keys[0], got.RetainUntil, wantUntil)
	}
}
