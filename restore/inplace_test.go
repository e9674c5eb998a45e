package restore_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
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
		restoretest.CopyFile(t, f.path, spool)
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

// TestRestoreMovesSnapshot: with MoveSnapshot, the first member's
// database is the snapshot file itself, moved into its directory and
// written in place, and every member is what etcdutl writes for it, file
// for file; on another file system, or with a revision bump, etcdutl
// copies the file, which stays.
func TestRestoreMovesSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	f := fetchBackup(t, 200)
	cluster := "m0=http://127.0.0.1:2380,m1=http://127.0.0.1:2381,m2=http://127.0.0.1:2382"
	for _, tc := range []struct {
		name   string
		spool  func(t *testing.T) string
		bump   uint64
		walDir string
		moved  bool
	}{
		{"same file system", func(t *testing.T) string { return t.TempDir() }, 0, "", true},
		{"wal dir", func(t *testing.T) string { return t.TempDir() }, 0, "wal-{name}", true},
		{"another file system", mountTmpfs, 0, "", false},
		{"revision bump", func(t *testing.T) string { return t.TempDir() }, 1000, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			spool := filepath.Join(tc.spool(t), "spool.db")
			restoretest.CopyFile(t, f.path, spool)
			o := restore.RestoreOptions{
				SnapshotPath: spool, InitialCluster: cluster, InitialClusterToken: "move-test",
				SkipHashCheck: true, MoveSnapshot: true, RevisionBump: tc.bump, MarkCompacted: tc.bump > 0,
			}
			all := o
			all.DataDir = filepath.Join(root, "all", "{name}")
			if tc.walDir != "" {
				all.WALDir = filepath.Join(root, "all", tc.walDir)
			}
			res, err := restore.Restore(t.Context(), all)
			if err != nil {
				t.Fatalf("Restore: %v", err)
			}
			_, err = os.Stat(spool)
			if moved := errors.Is(err, os.ErrNotExist); moved != tc.moved {
				t.Errorf("the snapshot file moved: %v, want %v (%v)", moved, tc.moved, err)
			}
			for _, m := range res.Members {
				one := o
				one.SnapshotPath, one.MoveSnapshot, one.Name = f.path, false, m.Name
				one.DataDir = filepath.Join(root, "one", "{name}")
				if tc.walDir != "" {
					one.WALDir = filepath.Join(root, "one", tc.walDir)
				}
				ref, err := restore.Restore(t.Context(), one)
				if err != nil {
					t.Fatalf("etcdutl's restore of %s alone: %v", m.Name, err)
				}
				r := ref.Members[0]
				sameFiles(t, walDir(r), walDir(m))
				sameFiles(t, filepath.Join(r.DataDir, "member", "snap"), filepath.Join(m.DataDir, "member", "snap"))
				sameContent(t, filepath.Join(r.DataDir, "member", "snap", "db"), filepath.Join(m.DataDir, "member", "snap", "db"))
				if fi, err := os.Stat(filepath.Join(m.DataDir, "member", "snap", "db")); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("db of %s: %v %v", m.Name, fi.Mode(), err)
				}
				if tc.walDir != "" {
					if _, err := os.Stat(filepath.Join(m.DataDir, "member", "wal")); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("member %s has a WAL in its data dir beside --wal-dir: %v", m.Name, err)
					}
				}
			}
		})
	}
}

// mountTmpfs mounts a fresh tmpfs on a temp dir, unmounted at cleanup.
// Without the privilege to mount it skips, except under CI=true where it
// fails.
func mountTmpfs(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64m"); err != nil {
		msg := fmt.Sprintf("mount tmpfs on %s: %v", dir, err)
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg + "; run as root or set CI=true to make this fail")
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}
