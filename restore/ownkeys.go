package restore

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.etcd.io/etcd/server/v3/storage/schema"
	"go.uber.org/zap"
	"google.golang.org/protobuf/encoding/protowire"

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
// dbPath, a raw snapshot or a bare bbolt file, in place, the way Replay
// writes: through etcd's storage code, in one write transaction (one
// revision), then revokes the leases that held only those keys. The
// trailer is removed as Replay does (restore the result with
// RestoreOptions.SkipHashCheck). The snapshot's history up to its
// revision is untouched, so HashKV at the snapshot's revision is the
// backup's.
func RemoveOwnKeys(ctx context.Context, dbPath string) (OwnKeys, error) {
	if err := stripTrailer(dbPath); err != nil {
		return OwnKeys{}, err
	}
	// Opening etcd's store rebuilds its index of every key (minutes at
	// 8 GB): only when there is something to remove.
	if live, err := anyLiveOwnKey(ctx, dbPath); err != nil || !live {
		if err != nil {
			return OwnKeys{}, err
		}
		rev, err := verify.Revision(ctx, dbPath)
		return OwnKeys{Revision: rev}, err
	}
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

// anyLiveOwnKey reports whether a key under OwnKeyPrefixes is live in
// the bbolt file dbPath (its newest record in the key bucket is not a
// tombstone), reading the bucket once without decoding the values. A
// record whose key it cannot read counts as live: the caller then takes
// etcd's store, which reads it properly.
func anyLiveOwnKey(ctx context.Context, dbPath string) (bool, error) {
	db, err := bolt.Open(dbPath, 0o600, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return false, fmt.Errorf("read lifeboat's keys in %s: %w", dbPath, err)
	}
	defer db.Close()
	live := map[string]bool{}
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
			key, ok := recordKey(v)
			if !ok {
				live["?"] = true
				return nil
			}
			if hasOwnPrefix(key) {
				live[string(key)] = !mvcc.IsTombstone(k)
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("read lifeboat's keys in %s: %w", dbPath, err)
	}
	for _, l := range live {
		if l {
			return true, nil
		}
	}
	return false, nil
}

// recordKey is the key of a key-bucket record, its KeyValue's first
// field as etcd writes it (field 1, bytes), without decoding the rest.
func recordKey(v []byte) ([]byte, bool) {
	num, typ, n := protowire.ConsumeTag(v)
	if n < 0 || num != 1 || typ != protowire.BytesType {
		return nil, false
	}
	k, m := protowire.ConsumeBytes(v[n:])
	return k, m >= 0
}

func hasOwnPrefix(k []byte) bool {
	return slices.ContainsFunc(OwnKeyPrefixes, func(p string) bool { return bytes.HasPrefix(k, []byte(p)) })
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
