package restore_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestInPlaceMatchesEtcdutl: a member restored in place (the drill's:
// the fetched file moved into the member, the database written where it
// lies by a child told to commit) is what etcdutl's restore writes for
// that member from the same snapshot: the same WAL and raft snapshot, a
// database of the same content, the trailer cut; and a child ended
// before the commit leaves the database as it was.
func TestInPlaceMatchesEtcdutl(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 200)
	root := t.TempDir()
	opts := restore.RestoreOptions{Name: "drill", PeerURLs: []string{"http://127.0.0.1:2380"}, InitialClusterToken: "in-place-test"}
	ref := opts
	ref.SnapshotPath, ref.DataDir, ref.SkipHashCheck = f.path, filepath.Join(root, "etcdutl"), true
	res, err := restore.Restore(t.Context(), ref)
	if err != nil {
		t.Fatalf("etcdutl's restore: %v", err)
	}
	want := res.Members[0].DataDir

	for _, commit := range []bool{true, false} {
		dir := filepath.Join(root, map[bool]string{true: "committed", false: "aborted"}[commit])
		spool := filepath.Join(root, "spool-"+filepath.Base(dir))
		copyFile(t, f.path, spool)
		db, err := restore.MoveIntoMember(spool, dir)
		if err != nil {
			t.Fatalf("MoveIntoMember: %v", err)
		}
		if _, err := os.Stat(spool); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the spool is still there: %v", err)
		}
		if fi, err := os.Stat(db); err != nil || fi.Size() != f.m.DBSize {
			t.Fatalf("moved database: %v, want %d bytes (the trailer cut): %v", fi.Size(), f.m.DBSize, err)
		}
		o := opts
		o.SnapshotPath, o.DataDir = db, dir
		p, err := restore.StartInPlace(t.Context(), o)
		if err != nil {
			t.Fatalf("StartInPlace: %v", err)
		}
		if !commit {
			p.Abort()
			sameContent(t, f.path, db)
			continue
		}
		if err := p.Commit(); err != nil {
			t.Fatalf("Commit: %v", err)
		}
		sameFiles(t, filepath.Join(want, "member", "wal"), filepath.Join(dir, "member", "wal"))
		sameFiles(t, filepath.Join(want, "member", "snap"), filepath.Join(dir, "member", "snap"))
		sameContent(t, filepath.Join(want, "member", "snap", "db"), db)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
