package restore

import (
	"errors"
	"iter"
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// faultyKV is etcd's real mvcc store with one fault between the replay
// and it (a proxy, as a network fault is): what the replay asks a write
// transaction to do lands differently, or not at all, while the store
// answers as if it had landed.
type faultyKV struct {
	mvcc.KV
	fault func(w mvcc.TxnWrite) mvcc.TxnWrite
}

func (f faultyKV) Write(tr *traceutil.Trace) mvcc.TxnWrite { return f.fault(f.KV.Write(tr)) }

// wrongValue puts every value with its first byte changed.
type wrongValue struct{ mvcc.TxnWrite }

func (w wrongValue) Put(key, value []byte, l lease.LeaseID) int64 {
	v := append([]byte{value[0] ^ 1}, value[1:]...)
	return w.TxnWrite.Put(key, v, l)
}

// lostDelete answers every delete as done and deletes nothing.
type lostDelete struct{ mvcc.TxnWrite }

func (w lostDelete) DeleteRange(key, end []byte) (int64, int64) { return 1, w.Rev() + 1 }

// wrongLease puts every key without its lease.
type wrongLease struct{ mvcc.TxnWrite }

func (w wrongLease) Put(key, value []byte, _ lease.LeaseID) int64 {
	return w.TxnWrite.Put(key, value, lease.NoLease)
}

// checkBase writes a bbolt file at revision 3 (a created at 2, b at 3).
func checkBase(t *testing.T) string {
	t.Helper()
	db := filepath.Join(t.TempDir(), "snap.db")
	be := backend.NewDefaultBackend(zap.NewNop(), db)
	kv := mvcc.NewStore(zap.NewNop(), be, nil, mvcc.StoreConfig{})
	for _, k := range []string{"a", "b"} {
		txn := kv.Write(traceutil.TODO())
		txn.Put([]byte(k), []byte("v"), 0)
		txn.End()
	}
	if kv.Rev() != 3 {
		t.Fatalf("base at %d", kv.Rev())
	}
	kv.Close()
	be.Close()
	return db
}

// TestReplayCheckFindsFaults: the replay's checks find a store whose
// writes do not land as the replay asked, though the store answers as
// if they had: a value written wrong, a delete lost, a lease not
// attached. Each fault is tried on a key written once and on a key
// written again later (the last write is the one the end state shows),
// the lost delete in a revision that also puts (so the store's revision
// still advances), and the same changes with no fault replay (the control).
func TestReplayCheckFindsFaults(t *testing.T) {
	leases := []repository.Lease{{ID: 0x10, TTL: 60, Revision: 4}}
	op := func(key string, create, version, l int64) repository.Op {
		return repository.Op{Key: []byte(key), Value: []byte("value of " + key), CreateRevision: create, Version: version, Lease: l}
	}
	del := func(key string) repository.Op { return repository.Op{Delete: true, Key: []byte(key)} }
	rev := func(r int64, ops ...repository.Op) repository.Revision {
		return repository.Revision{Revision: r, Received: time.Now(), Ops: ops}
	}
	changes := []repository.Revision{
		rev(4, op("c", 4, 1, 0x10), op("a", 2, 2, 0)),
		rev(5, del("b"), op("d", 5, 1, 0)), // the revision advances: only the delete is lost
		rev(6, op("a", 2, 3, 0x10)),
	}
	for _, tc := range []struct {
		name  string
		fault func(mvcc.TxnWrite) mvcc.TxnWrite
	}{
		{"no fault", nil},
		{"wrong value", func(w mvcc.TxnWrite) mvcc.TxnWrite { return wrongValue{w} }},
		{"lost delete", func(w mvcc.TxnWrite) mvcc.TxnWrite { return lostDelete{w} }},
		{"wrong lease", func(w mvcc.TxnWrite) mvcc.TxnWrite { return wrongLease{w} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := checkBase(t)
			r, err := openReplayer(db, zap.NewNop())
			if err != nil {
				t.Fatal(err)
			}
			defer r.close()
			if tc.fault != nil {
				r.kv = faultyKV{KV: r.kv, fault: tc.fault}
			}
			seg := &repository.Segment{Revisions: changes, Leases: leases}
			segs := iter.Seq2[checkedSegment, error](func(yield func(checkedSegment, error) bool) {
				yield(checkedSegment{key: "seg", seg: seg}, nil)
			})
			var st ReplayStats
			err = r.applyAll(t.Context(), replayJob{DB: db, From: 3, To: 6}, segs, &st)
			if tc.fault == nil {
				if err != nil {
					t.Fatalf("replay with no fault: %v", err)
				}
				// The end check reads a deleted key back: one the
				// store holds fails it.
				r.deleted["a"] = 6
				if err := r.checkDeleted(t.Context()); !errors.Is(err, ErrReplay) {
					t.Errorf("the end check with a deleted key the store holds: %v, want ErrReplay", err)
				}
				return
			}
			if !errors.Is(err, ErrReplay) {
				t.Fatalf("replay with %s: %v, want ErrReplay", tc.name, err)
			}
			t.Logf("%s: %v", tc.name, err)
		})
	}
}
