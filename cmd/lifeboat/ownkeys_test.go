package main

import (
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestRestoreRemovesLifeboatKeys: a backup taken while the agent held its
// lock holds the lock key (/lifeboat/lock/<cluster>/<lease>) with its
// lease. A restore removes lifeboat's own keys (one revision above the
// backup's, the lease revoked) and says so; --keep-lifeboat-keys keeps
// them (issue 29).
func TestRestoreRemovesLifeboatKeys(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 30)
	cli := c.Client(t)
	lease, err := cli.Grant(t.Context(), 60)
	if err != nil {
		t.Fatal(err)
	}
	lockKey := "/lifeboat/lock/test/694d9a1b2c3d4e5f"
	if _, err := cli.Put(t.Context(), lockKey, "agent-a", clientv3.WithLease(lease.ID)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	code, out, errOut := runCLI(t, nil, snapshotArgs(dir, c.Endpoints()...)...)
	if code != exitOK {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
	m := onlyManifest(t, dir)
	restoreInto := func(t *testing.T, extra ...string) (verify.Status, string) {
		t.Helper()
		data := filepath.Join(t.TempDir(), "etcd")
		args := append([]string{"restore", "latest", "--store", "file://" + filepath.Join(dir, "store"), "--cluster", "test",
			"--spool-dir", filepath.Join(dir, "spool"), "--data-dir", data, "--name", "m1", "--initial-advertise-peer-urls", "http://10.0.0.1:2380"}, extra...)
		code, out, errOut := runCLI(t, nil, args...)
		if code != exitOK {
			t.Fatalf("restore exit %d\n%s\n%s", code, out, errOut)
		}
		st, err := verify.File(t.Context(), filepath.Join(data, "member", "snap", "db"))
		if err != nil {
			t.Fatal(err)
		}
		return st, out
	}
	t.Run("removed", func(t *testing.T) {
		st, out := restoreInto(t)
		if st.TotalKeys != m.TotalKeys-1 || st.Revision != m.Revision+1 {
			t.Errorf("restored %d keys at revision %d; want %d (the lock key removed) at %d", st.TotalKeys, st.Revision, m.TotalKeys-1, m.Revision+1)
		}
		if !strings.Contains(out, lockKey) || !strings.Contains(out, "--keep-lifeboat-keys") {
			t.Errorf("the output does not name the removed key and how to keep it:\n%s", out)
		}
	})
	t.Run("kept", func(t *testing.T) {
		st, _ := restoreInto(t, "--keep-lifeboat-keys")
		if st.TotalKeys != m.TotalKeys || st.Revision != m.Revision {
			t.Errorf("restored %d keys at revision %d; want the backup's %d at %d", st.TotalKeys, st.Revision, m.TotalKeys, m.Revision)
		}
	})
}
