package backup

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRevisionTimeAfterItsWrites: the time from which a backup's state is
// the cluster's (Manifest.RevisionTime, a window's FromTime, capture's
// start marker) is after every write the snapshot holds. Writes are made
// on the backup's own clock calls before the stream starts (CreatedAt is
// one of them): each one the snapshot holds was done before its
// RevisionTime. (Before, it was CreatedAt, taken before the snapshot's
// revision was fixed: `--to-time` at it included later writes.)
func TestRevisionTimeAfterItsWrites(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	if _, err := cli.Put(t.Context(), "/seed", "s"); err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	type write struct {
		rev  int64
		done time.Time
	}
	var writes []write
	calls := 0
	b := &repository.Repo{Store: st, Cluster: "c"}
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  b,
		Encoding: repository.Encoding{Compression: "zstd"},
		Version:  "test",
		// The first two calls come before the stream, on the backup's
		// goroutine: the spool sweep's and CreatedAt's.
		Now: func() time.Time {
			now := time.Now()
			if calls++; calls <= 2 {
				r, err := cli.Put(t.Context(), fmt.Sprintf("/between/%d", calls), "w")
				if err != nil {
					t.Error(err)
					return now
				}
				writes = append(writes, write{r.Header.Revision, time.Now()})
			}
			return now
		},
	}
	lg, _ := jobtest.Logger(t)
	m, err := Run(t.Context(), job, lg)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, w := range writes {
		if w.rev > m.Revision {
			continue
		}
		held++
		if m.RevisionTime().Before(w.done) {
			t.Errorf("revision %d, in the snapshot, was written by %s: after the backup's revision time %s (created at %s)",
				w.rev, w.done.Format(time.RFC3339Nano), m.RevisionTime().Format(time.RFC3339Nano), m.CreatedAt.Format(time.RFC3339Nano))
		}
	}
	if held != 2 {
		t.Fatalf("the snapshot (revision %d) holds %d of the writes %v: want both", m.Revision, held, writes)
	}
	if m.RevisionAt.IsZero() || m.RevisionAt.Before(m.CreatedAt) {
		t.Errorf("revision_at %s: want it recorded, after created_at %s", m.RevisionAt, m.CreatedAt)
	}
	// A generation on it starts there.
	if _, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: m.EtcdClusterID,
		SnapshotID: m.ID, SnapshotRevision: m.Revision, Through: m.Revision, At: m.RevisionTime().UTC(), Token: 1}); err != nil {
		t.Fatal(err)
	}
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(t.Context(), l)
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows %v %v: want 1", ws, err)
	}
	if !ws[0].FromTime.Equal(m.RevisionTime()) {
		t.Errorf("window from %s: want the backup's revision time %s", ws[0].FromTime, m.RevisionTime())
	}
}
