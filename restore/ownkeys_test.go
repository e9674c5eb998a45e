package restore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestRemoveOwnKeys: the agent's lock key and a drill probe key go, in
// one revision; the lock's lease is revoked; a lease another key shares
// stays, and so do the other keys.
func TestRemoveOwnKeys(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	ctx := t.Context()
	lock, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range []struct {
		k     string
		lease clientv3.LeaseID
	}{{"/app/a", 0}, {"/lifeboat/lock/c/1", lock.ID}, {"/lifeboat/drill/ab", shared.ID}, {"/app/leased", shared.ID}, {"/lifeboatish", 0}} {
		if _, err := cli.Put(ctx, kv.k, "v", clientv3.WithLease(kv.lease)); err != nil {
			t.Fatal(err)
		}
	}
	snap := c.SaveSnapshot(t)
	before, err := verify.File(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	own, err := restore.RemoveOwnKeys(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	want := restore.OwnKeys{Keys: []string{"/lifeboat/drill/ab", "/lifeboat/lock/c/1"}, Leases: []int64{int64(lock.ID)}, Revision: before.Revision + 1}
	if diff := cmp.Diff(want, own); diff != "" {
		t.Errorf("RemoveOwnKeys (-want +got):\n%s", diff)
	}
	after, err := verify.File(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	if after.TotalKeys != before.TotalKeys-2 || after.Revision != before.Revision+1 {
		t.Errorf("after: %d keys at revision %d; before %d at %d", after.TotalKeys, after.Revision, before.TotalKeys, before.Revision)
	}
	be := backend.NewDefaultBackend(zap.NewNop(), snap)
	le := lease.NewLessor(zap.NewNop(), be, nil, lease.LessorConfig{MinLeaseTTL: 1})
	kv := mvcc.NewStore(zap.NewNop(), be, le, mvcc.StoreConfig{})
	defer func() { le.Stop(); kv.Close(); be.Close() }()
	if le.Lookup(lease.LeaseID(lock.ID)) != nil || le.Lookup(lease.LeaseID(shared.ID)) == nil {
		t.Errorf("leases after: lock %v (want gone), shared %v (want kept)", le.Lookup(lease.LeaseID(lock.ID)), le.Lookup(lease.LeaseID(shared.ID)))
	}
	res, err := kv.Range(ctx, []byte("/"), []byte("0"), mvcc.RangeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, k := range res.KVs {
		keys = append(keys, string(k.Key))
	}
	if diff := cmp.Diff([]string{"/app/a", "/app/leased", "/lifeboatish"}, keys); diff != "" {
		t.Errorf("keys after (-want +got):\n%s", diff)
	}
}

// TestRemoveOwnKeysNewestRecord: whether there is anything to remove is
// decided by each key's newest record. A lock key deleted before the
// snapshot leaves the file as it was (the revision and keys of the
// snapshot); one deleted and written again is removed.
func TestRemoveOwnKeysNewestRecord(t *testing.T) {
	for _, again := range []bool{false, true} {
		c := etcdtest.Start(t, etcdtest.Options{Members: 1})
		cli := c.Client(t)
		ctx := t.Context()
		for _, k := range []string{"/app/a", "/lifeboat/lock/c/1", "/lifeboatish"} {
			if _, err := cli.Put(ctx, k, "v"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := cli.Delete(ctx, "/lifeboat/lock/c/1"); err != nil {
			t.Fatal(err)
		}
		if again {
			if _, err := cli.Put(ctx, "/lifeboat/lock/c/1", "again"); err != nil {
				t.Fatal(err)
			}
		}
		snap := c.SaveSnapshot(t)
		before, err := verify.File(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		own, err := restore.RemoveOwnKeys(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		want := restore.OwnKeys{Revision: before.Revision}
		if again {
			want = restore.OwnKeys{Keys: []string{"/lifeboat/lock/c/1"}, Revision: before.Revision + 1}
		}
		if diff := cmp.Diff(want, own); diff != "" {
			t.Errorf("written again %v: RemoveOwnKeys (-want +got):\n%s", again, diff)
		}
		after, err := verify.File(ctx, snap)
		if err != nil {
			t.Fatal(err)
		}
		if after.TotalKeys != 2 || after.Revision != want.Revision {
			t.Errorf("written again %v: after: %d keys at revision %d, want 2 at %d", again, after.TotalKeys, after.Revision, want.Revision)
		}
	}
}

// TestRemoveOwnKeysAsTheStore: RemoveOwnKeys, which finds lifeboat's keys
// by reading the records and writes their removal with etcd's backend,
// leaves the file etcd's store leaves (its reference: the same removal
// through the store, with its index and lessor) bucket by bucket, key by
// key: the lock key under its own lease (revoked), a drill key under a
// lease another key shares (kept), one without a lease, one deleted
// before the snapshot, one deleted and written again, and a lease-held
// key moved off its lease.
func TestRemoveOwnKeysAsTheStore(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	ctx := t.Context()
	grant := func() clientv3.LeaseID {
		l, err := cli.Grant(ctx, 600)
		if err != nil {
			t.Fatal(err)
		}
		return l.ID
	}
	lock, shared, moved := grant(), grant(), grant()
	put := func(k string, l clientv3.LeaseID) {
		if _, err := cli.Put(ctx, k, "v-"+k, clientv3.WithLease(l)); err != nil {
			t.Fatal(err)
		}
	}
	del := func(k string) {
		if _, err := cli.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 50 {
		put(fmt.Sprintf("/app/%02d", i), 0)
	}
	put("/lifeboat/lock/c/1", lock)
	put("/lifeboat/drill/ab", shared)
	put("/app/leased", shared)
	put("/lifeboat/drill/plain", 0)
	put("/lifeboat/drill/gone", 0)
	del("/lifeboat/drill/gone")
	put("/lifeboat/lock/c/again", 0)
	del("/lifeboat/lock/c/again")
	put("/lifeboat/lock/c/again", lock)
	put("/app/moved", moved)
	put("/lifeboat/lock/c/moved", moved)
	put("/app/moved", 0) // moved holds only lifeboat's key now
	snap := c.SaveSnapshot(t)
	ref := filepath.Join(t.TempDir(), "ref.db")
	data, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ref, data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := restore.RemoveOwnKeys(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	want, err := restore.RemoveThroughStore(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(want.Leases)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RemoveOwnKeys (-store +records):\n%s", diff)
	}
	if len(got.Keys) != 5 || len(got.Leases) != 2 {
		t.Errorf("removed %v, revoked %v: want 5 keys, 2 leases", got.Keys, got.Leases)
	}
	sameContent(t, ref, snap)
}
