package prune

import (
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestPruneRewritesIndex: a prune that deletes backups of a cluster with
// an index (its agent's) writes a new one without them, so a fleet
// reading the cluster cold does not count them; a cluster without an
// index gets none.
func TestPruneRewritesIndex(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, withIndex := range []bool{true, false} {
		d, err := uploader.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		b := repository.New(d, jobtest.Cluster)
		for h := 5; h >= 1; h-- {
			jobtest.PutBackup(t, b, now.Add(-time.Duration(h)*time.Hour), uploader.PutOptions{}, false)
		}
		if withIndex {
			if _, err := (&repository.Indexer{Repo: b, Writer: "agent"}).Write(t.Context(), now.Add(-30*time.Minute)); err != nil {
				t.Fatal(err)
			}
		}
		res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 2}, OrphanGrace: time.Hour, Now: fixedClock(now)}, nil)
		if err != nil || len(res.Deleted) != 3 {
			t.Fatalf("prune: %v, deleted %v", err, res)
		}
		var idx []uploader.ObjectInfo
		if err := d.List(t.Context(), jobtest.Cluster+"/index/", func(o uploader.ObjectInfo) error {
			idx = append(idx, o)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !withIndex {
			if len(idx) != 0 {
				t.Errorf("a cluster without an index: prune wrote %d", len(idx))
			}
			continue
		}
		got, err := b.ReadIndex(t.Context(), b.NewestIndexKey(idx))
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Docs) != 2 || got.Writer != "lifeboat prune" || !got.WrittenAt.Equal(now) {
			t.Errorf("the index after prune: %d documents by %q at %s, want the 2 kept backups' manifests by lifeboat prune at %s", len(got.Docs), got.Writer, got.WrittenAt, now)
		}
	}
}
