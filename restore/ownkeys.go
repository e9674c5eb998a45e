package restore

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"
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
