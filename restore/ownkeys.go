package restore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/lease/leasepb"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// OwnKeyPrefixes are the key prefixes lifeboat writes into a cluster it
// backs up: the agent's lock (agent.LockPrefix, a key per holder with
// its lease) and a drill's probe keys. A restored cluster must not carry
// them: the lock would be held by a lease of the old cluster.
var OwnKeyPrefixes = []string{"/lifeboat/lock/", "/lifeboat/drill/"}

// OwnKeys is what RemoveOwnKeys removed.
type OwnKeys struct {
	// Keys removed, sorted; Leases revoked (those only lifeboat's keys
	// were attached to).
	Keys   []string
	Leases []int64
	// Revision is the file's revision after the removal: one above the
	// snapshot's when keys were removed (a delete is a revision, as in
	// the source cluster), the snapshot's otherwise.
	Revision int64
}

// RemoveOwnKeys deletes lifeboat's own keys (OwnKeyPrefixes) from
// dbPath, a raw snapshot or a bare bbolt file, in place, as etcd's store
// would: one delete revision for all of them, and the leases that held
// only those keys revoked. They are found by one read of the key
// bucket's records and the removal is written with etcd's backend
// (TestRemoveOwnKeysAsTheStore: the file is the one etcd's store leaves);
// a record that read cannot follow sends it through the store itself
// (its index of every key rebuilt, as Replay does). The trailer is
// removed as Replay does (restore the result with
// RestoreOptions.SkipHashCheck). The snapshot's history up to its
// revision is untouched, so HashKV at the snapshot's revision is the
// backup's.
func RemoveOwnKeys(ctx context.Context, dbPath string) (OwnKeys, error) {
	if err := stripTrailer(dbPath); err != nil {
		return OwnKeys{}, err
	}
	// Opening etcd's store rebuilds its index of every key (a minute and
	// more at 8 GB): one read of the records finds what to remove instead,
	// and the removal is written with etcd's backend. A record that read
	// cannot follow sends the removal through the store.
	sc, err := scanOwnKeys(ctx, dbPath)
	if err != nil {
		return OwnKeys{}, err
	}
	if !sc.sure {
		return removeThroughStore(ctx, dbPath)
	}
	rev, err := verify.Revision(ctx, dbPath)
	if err != nil {
		return OwnKeys{}, err
	}
	res := sc.plan(rev)
	if len(res.Keys) == 0 {
		return res, nil
	}
	if res.Leases, err = writeRemoval(dbPath, rev, res.Keys, res.Leases); err != nil {
		return OwnKeys{}, fmt.Errorf("remove lifeboat's keys from %s: %w", dbPath, err)
	}
	return res, nil
}

// removeThroughStore is RemoveOwnKeys through etcd's store: its index
// rebuilt from the whole file, the keys deleted in one write
// transaction, the leases revoked by its lessor.
func removeThroughStore(ctx context.Context, dbPath string) (OwnKeys, error) {
	r, err := openReplayer(dbPath, zap.NewNop())
	if err != nil {
		return OwnKeys{}, err
	}
	defer r.close()
	keys, leases, err := r.ownKeys(ctx)
	if err != nil {
		return OwnKeys{}, err
	}
	res := OwnKeys{Keys: keys}
	// A lease is revoked when only lifeboat's keys are attached to it
	// (decided before the delete detaches them).
	for _, id := range leases {
		l := r.le.Lookup(lease.LeaseID(id))
		if l != nil && !slices.ContainsFunc(l.Keys(), func(k string) bool { return !isOwnKey(k) }) {
			res.Leases = append(res.Leases, id)
		}
	}
	if len(keys) > 0 {
		txn := r.kv.Write(r.trace)
		for _, k := range keys {
			txn.DeleteRange([]byte(k), nil)
		}
		txn.End()
	}
	for _, id := range res.Leases {
		// Its keys are deleted: the revoke writes no revision.
		if err := r.le.Revoke(lease.LeaseID(id)); err != nil {
			return OwnKeys{}, fmt.Errorf("remove lifeboat's keys from %s: revoke lease %x: %w", dbPath, id, err)
		}
	}
	res.Revision = r.kv.Rev()
	if err := r.close(); err != nil {
		return OwnKeys{}, err
	}
	return res, nil
}

// ownScan is what one read of the key bucket found: lifeboat's live keys
// with their leases, and the leases other live keys hang on.
type ownScan struct {
	own    map[string]int64 // live key under OwnKeyPrefixes: its lease (0: none)
	leased map[string]int64 // other live keys with a lease
	// sure: every record was read; otherwise the store must decide.
	sure bool
}

// scanOwnKeys reads every record of the key bucket of the bbolt file
// dbPath once, in revision order, decoding only each record's key and
// lease (protowire), so that each key's newest record decides: a
// tombstone or a put without a lease drops it.
func scanOwnKeys(ctx context.Context, dbPath string) (ownScan, error) {
	sc := ownScan{own: map[string]int64{}, leased: map[string]int64{}, sure: true}
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return sc, fmt.Errorf("read lifeboat's keys in %s: %w", dbPath, err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(schema.Key.Name())
		if b == nil {
			return nil
		}
		c := b.Cursor()
		n := 0
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if n++; n%(1<<16) == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
			key, lease, ok := recordKeyLease(v)
			if !ok {
				sc.sure = false
				return nil
			}
			sc.note(key, lease, mvcc.IsTombstone(k))
		}
		return nil
	})
	if err != nil {
		return sc, fmt.Errorf("read lifeboat's keys in %s: %w", dbPath, err)
	}
	return sc, nil
}

// note records key's newest record.
func (sc *ownScan) note(key []byte, lease int64, tombstone bool) {
	m := sc.leased
	if hasOwnPrefix(key) {
		m = sc.own
	}
	switch {
	case tombstone:
		delete(m, string(key))
	case lease == 0 && !hasOwnPrefix(key):
		delete(m, string(key))
	default:
		m[string(key)] = lease
	}
}

// plan is the removal the scan calls for at revision rev: lifeboat's live
// keys (sorted, deleted at rev+1) and the leases only they hang on.
func (sc *ownScan) plan(rev int64) OwnKeys {
	res := OwnKeys{Revision: rev}
	shared := map[int64]bool{}
	for _, l := range sc.leased {
		shared[l] = true
	}
	for k, l := range sc.own {
		res.Keys = append(res.Keys, k)
		if l != 0 && !shared[l] && !slices.Contains(res.Leases, l) {
			res.Leases = append(res.Leases, l)
		}
	}
	slices.Sort(res.Keys)
	slices.Sort(res.Leases)
	if len(res.Keys) > 0 {
		res.Revision = rev + 1
	}
	return res
}

// writeRemoval writes the removal of keys and leases into dbPath with
// etcd's backend, in one transaction, as etcd's store writes a delete
// and a revoke: a tombstone record per key at revision rev+1
// (sub-revisions in key order, the value the bare key), and each lease's
// record deleted. It returns the leases revoked: one missing from the
// file is skipped, as etcd's lessor never knew it.
func writeRemoval(dbPath string, rev int64, keys []string, leases []int64) ([]int64, error) {
	be := backend.NewDefaultBackend(zap.NewNop(), dbPath)
	tx := be.BatchTx()
	tx.LockOutsideApply()
	for i, k := range keys {
		rb := mvcc.RevToBytes(mvcc.Revision{Main: rev + 1, Sub: int64(i)}, mvcc.NewRevBytes())
		rb = append(rb, tombstoneMark)
		d, err := proto.Marshal(&mvccpb.KeyValue{Key: []byte(k)})
		if err != nil {
			tx.Unlock()
			be.Close()
			return nil, err
		}
		tx.UnsafeSeqPut(schema.Key, rb, d)
	}
	var revoked []int64
	for _, id := range leases {
		ok, err := hasLease(tx, id)
		if err != nil {
			tx.Unlock()
			be.Close()
			return nil, err
		}
		if ok {
			schema.UnsafeDeleteLease(tx, &leasepb.Lease{ID: id})
			revoked = append(revoked, id)
		}
	}
	tx.Unlock()
	be.ForceCommit()
	return revoked, be.Close()
}

// hasLease reports whether lease id has its record in the file; an
// unreadable record is an error (etcd's reader panics on it).
func hasLease(tx backend.UnsafeReader, id int64) (ok bool, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease %x: unreadable record: %v", id, r)
		}
	}()
	return schema.MustUnsafeGetLease(tx, id) != nil, nil
}

// tombstoneMark ends the revision key of a delete's record in etcd's key
// bucket (mvcc.IsTombstone).
const tombstoneMark = 't'

// recordKeyLease is the key and lease of a key-bucket record (an
// mvccpb.KeyValue: fields 1 and 6), read with protowire without copying
// or decoding the value.
func recordKeyLease(v []byte) (key []byte, lease int64, ok bool) {
	for len(v) > 0 {
		num, typ, n := protowire.ConsumeTag(v)
		if n < 0 {
			return nil, 0, false
		}
		v = v[n:]
		switch {
		case num == 1 && typ == protowire.BytesType:
			key, n = protowire.ConsumeBytes(v)
		case num == 6 && typ == protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(v)
			lease = int64(x)
		default:
			n = protowire.ConsumeFieldValue(num, typ, v)
		}
		if n < 0 {
			return nil, 0, false
		}
		v = v[n:]
	}
	return key, lease, key != nil
}

// hasOwnPrefix is isOwnKey for a record's key bytes, without a copy.
func hasOwnPrefix(k []byte) bool {
	return slices.ContainsFunc(OwnKeyPrefixes, func(p string) bool { return len(k) >= len(p) && string(k[:len(p)]) == p })
}

func isOwnKey(k string) bool {
	return slices.ContainsFunc(OwnKeyPrefixes, func(p string) bool { return strings.HasPrefix(k, p) })
}

// ownKeys lists the live keys under OwnKeyPrefixes and their leases.
func (r *replayer) ownKeys(ctx context.Context) (keys []string, leases []int64, err error) {
	txn := r.kv.Read(mvcc.ConcurrentReadTxMode, r.trace)
	defer txn.End()
	for _, p := range OwnKeyPrefixes {
		end := []byte(p)
		end[len(end)-1]++
		res, err := txn.Range(ctx, []byte(p), end, mvcc.RangeOptions{})
		if err != nil {
			return nil, nil, fmt.Errorf("read lifeboat's keys %s: %w", p, err)
		}
		for _, kv := range res.KVs {
			keys = append(keys, string(kv.Key))
			if kv.Lease != 0 && !slices.Contains(leases, kv.Lease) {
				leases = append(leases, kv.Lease)
			}
		}
	}
	slices.Sort(keys)
	return keys, leases, nil
}
