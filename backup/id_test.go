package backup

import (
	"errors"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestSnapshotNeverOverwritesABackup: a second backup of the same revision
// in the same second is refused, and the first stays intact.
func TestSnapshotNeverOverwritesABackup(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	if _, err := cli.Put(t.Context(), "/registry/namespaces/default", "x"); err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	frozen := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  &repository.Repo{Store: st, Cluster: "c"},
		Encoding: repository.Encoding{Compression: "zstd"},
		Now:      func() time.Time { return frozen },
	}
	lg, _ := jobtest.Logger(t)
	first, err := Run(t.Context(), job, lg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Run(t.Context(), job, lg)
	var ee *ExistsError
	if !errors.Is(err, ErrExists) || !errors.As(err, &ee) || ee.ID != first.ID {
		t.Fatalf("second snapshot in the same second: %v, want ErrExists naming %s", err, first.ID)
	}
	m, err := job.Backups.Manifest(t.Context(), first.ID)
	if err != nil || m.ObjectSHA256 != first.ObjectSHA256 {
		t.Fatalf("first backup changed: %v %v", m, err)
	}
	rc, err := job.Backups.Open(t.Context(), m, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Fatalf("first backup no longer reads back: %v", err)
	}
}
