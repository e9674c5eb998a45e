package repository_test

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestSelectLatestProven (item 19): latest-proven is the newest backup
// whose last drill passed; a backup whose last report cannot be read is
// not proven, even when an older report of it passed.
func TestSelectLatestProven(t *testing.T) {
	b := dirBackups(t, t.TempDir())
	ctx := t.Context()
	base := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var ids []string
	for i := range 5 {
		id := repository.NewID(base.Add(time.Duration(i)*time.Hour), int64(100+i))
		m := &repository.Manifest{
			Format: repository.ManifestFormat, ID: id, Cluster: b.Cluster, Revision: int64(100 + i),
			Object: b.ObjectKey(id, repository.Encoding{Compression: "none"}), ObjectSHA256: strings.Repeat("a", 64), SnapshotSHA256: strings.Repeat("b", 64),
			Compression: "none", Encryption: "none",
		}
		if _, err := b.Store.Put(ctx, m.Object, strings.NewReader(""), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := b.PutManifest(ctx, m); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	report := func(id string, at time.Time, passed bool) {
		t.Helper()
		r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: id, Cluster: b.Cluster, StartedAt: at, FinishedAt: at, Passed: passed}
		if !passed {
			r.Error = "check failed"
		}
		if err := b.PutDrillReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := repository.Select(ctx, b, "latest-proven", rand.IntN); !errors.Is(err, repository.ErrNotProven) || !strings.Contains(err.Error(), "lifeboat drill") {
		t.Errorf("no drills: %v, want ErrNotProven saying to drill", err)
	}
	// ids[4]: no drill. ids[3]: last drill failed (an older one passed).
	// ids[2]: last report unreadable (an older one passed). ids[1]: passed.
	report(ids[3], base.Add(20*time.Hour), true)
	report(ids[3], base.Add(21*time.Hour), false)
	report(ids[2], base.Add(20*time.Hour), true)
	if _, err := b.Store.Put(ctx, b.DrillReportKey(ids[2], base.Add(21*time.Hour)), strings.NewReader("{not json"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	report(ids[1], base.Add(20*time.Hour), true)
	report(ids[0], base.Add(20*time.Hour), true)
	m, err := repository.Select(ctx, b, "latest-proven", rand.IntN)
	if err != nil || m.ID != ids[1] {
		t.Errorf("Select(latest-proven) = %v, %v; want %s", m, err, ids[1])
	}
}
