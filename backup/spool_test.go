package backup

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRunSweepsOldSpoolLeftovers: a database-sized lifeboat-*.db.part that
// a version before nameless spool files left behind (killed mid-snapshot)
// is removed by the next backup, and the backup still commits.
func TestRunSweepsOldSpoolLeftovers(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	if _, err := c.Client(t).Put(t.Context(), "/registry/namespaces/default", "x"); err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	spool := filepath.Join(t.TempDir(), "spool")
	if err := os.MkdirAll(spool, 0o700); err != nil {
		t.Fatal(err)
	}
	leftover := filepath.Join(spool, "lifeboat-20261130T113800Z-r42-abcd.db.part")
	if err := os.WriteFile(leftover, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * snapshot.LeftoverAge)
	if err := os.Chtimes(leftover, old, old); err != nil {
		t.Fatal(err)
	}
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: spool,
		Backups:  &repository.Repo{Store: st, Cluster: "c"},
		Encoding: repository.Encoding{Compression: "zstd"},
	}
	lg, logs := jobtest.Logger(t)
	if _, err := Run(t.Context(), job, lg); err != nil {
		t.Fatal(err)
	}
	if left := jobtest.DirEntries(t, spool); len(left) != 0 {
		t.Errorf("spool dir holds %v after the backup; want the old leftover removed", left)
	}
	if !strings.Contains(logs.String(), "lifeboat-20261130T113800Z-r42-abcd.db.part") {
		t.Errorf("the removal is not logged")
	}
}
