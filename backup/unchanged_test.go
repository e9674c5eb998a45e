package backup

import (
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRunSkipUnchanged: with SkipUnchanged, a snapshot of an idle cluster
// (the revision and the live HashKV of every member equal to the newest
// backup's) is not stored again: Run returns an *UnchangedError naming the
// newest backup. After a write it stores a backup again, and without
// SkipUnchanged it always stores (issue 29).
func TestRunSkipUnchanged(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 3})
	cli := c.Client(t)
	if _, err := cli.Put(t.Context(), "/a", "1"); err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	var tick atomic.Int64
	base := time.Now().Add(-time.Hour)
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  &repository.Repo{Store: st, Cluster: "c"},
		Encoding: repository.Encoding{Compression: "zstd"},
		// A minute per reading: no two backups share an id's second.
		Now: func() time.Time { return base.Add(time.Duration(tick.Add(1)) * time.Minute) },
	}
	lg, logs := jobtest.Logger(t)
	first, err := Run(t.Context(), job, lg)
	if err != nil {
		t.Fatalf("first backup: %v", err)
	}

	skip := job
	skip.SkipUnchanged = true
	m, err := Run(t.Context(), skip, lg)
	var ue *UnchangedError
	if !errors.As(err, &ue) {
		t.Fatalf("Run of an idle cluster with SkipUnchanged = %v, %v; want an *UnchangedError", m, err)
	}
	if ue.Backup == nil || ue.Backup.ID != first.ID || ue.Members != 3 {
		t.Errorf("UnchangedError = %+v; want backup %s checked on 3 members", ue, first.ID)
	}
	if got := countManifests(t, job.Backups); got != 1 {
		t.Errorf("%d backups stored after an unchanged check; want 1\nlogs:\n%s", got, logs.String())
	}

	plain, err := Run(t.Context(), job, lg)
	if err != nil || plain.ID == first.ID {
		t.Fatalf("Run without SkipUnchanged = %v, %v; want a new backup of the same state", plain, err)
	}

	if _, err := cli.Put(t.Context(), "/a", "2"); err != nil {
		t.Fatal(err)
	}
	changed, err := Run(t.Context(), skip, lg)
	if err != nil {
		t.Fatalf("Run after a write with SkipUnchanged: %v; want a stored backup", err)
	}
	if changed.Revision <= first.Revision {
		t.Errorf("backup after a write at revision %d; want above %d", changed.Revision, first.Revision)
	}
	if got := countManifests(t, job.Backups); got != 3 {
		t.Errorf("%d backups stored; want 3", got)
	}
}

func countManifests(t *testing.T, b *repository.Repo) int {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return len(l.Backups)
}
