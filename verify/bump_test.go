package verify_test

import (
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestKeysAfterRevisionBump: a data dir restored with a revision bump
// (etcdutl's, as restore --bump-revision and every --kubeadm restore do)
// holds a record without a key at the bumped revision: the marker of the
// new revision, which etcd indexes as the empty key and no range returns.
// File says so (EmptyKey), and ServedKeys is what etcd's API counts. (Only
// TotalKeys, with the marker, was known: restore --kubeadm's check of a
// backup of a cluster once restored with a bump failed: "325 keys,
// written 326", and a drill of it would fail the same way.)
func TestKeysAfterRevisionBump(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	for _, k := range []string{"/registry/a", "/registry/b", "/registry/c"} {
		if _, err := cli.Put(ctx, k, "v"); err != nil {
			t.Fatal(err)
		}
	}
	snap := saveSnapshot(t, ctx, c.ClientConfig(), c.Endpoints()[0], t.TempDir())
	dir := filepath.Join(t.TempDir(), "m0")
	if _, err := restore.Restore(ctx, restore.RestoreOptions{SnapshotPath: snap, DataDir: dir, Name: "m0",
		PeerURLs: []string{"http://127.0.0.1:2380"}, RevisionBump: 1000, MarkCompacted: true}); err != nil {
		t.Fatal(err)
	}
	st, err := verify.File(ctx, filepath.Join(dir, "member", "snap", "db"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	if !st.EmptyKey || st.ServedKeys() != int(resp.Count) || st.TotalKeys != int(resp.Count)+1 {
		t.Errorf("the restored file: %d keys, empty key %v, %d served by File; etcd served %d; want the empty key and %d served", st.TotalKeys, st.EmptyKey, st.ServedKeys(), resp.Count, resp.Count)
	}
	before, err := verify.File(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if before.EmptyKey || before.ServedKeys() != int(resp.Count) {
		t.Errorf("the snapshot before the bump: empty key %v, %d served; want none and %d", before.EmptyKey, before.ServedKeys(), resp.Count)
	}
}
