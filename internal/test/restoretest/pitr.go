package restoretest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// LiveState is the source at one revision: what a Get at it returns and
// its HashKV (with the compact revision it was computed over).
type LiveState struct {
	KVs     []*mvccpb.KeyValue
	Hash    uint32
	Compact int64
}

// PITRSource is a real etcd with a captured generation.
type PITRSource struct {
	C        *etcdtest.Cluster
	Cli      *clientv3.Client
	StoreDir string
	Repo     *repository.Repo
	IDs      []age.Identity
	Anchor   *repository.Manifest
	Later    *repository.Manifest // a scheduled snapshot taken during the generation
	Capture  *changetest.Capture
	Recorded map[int64]LiveState // states before the compaction (no longer readable live)
	Compact  int64               // the compaction during the generation
	Through  int64
	Syncs    []SyncPoint
}

// SyncPoint is a capture Sync: when it returned and the revision it
// made durable.
type SyncPoint struct {
	At      time.Time // after the Sync returned
	Through int64
}

// Workload drives random Kubernetes-like changes: puts, deletes, multi-op
// transactions, delete-range, leases granted, attached, moved, revoked and
// expired.
type Workload struct {
	T      testing.TB
	Cli    *clientv3.Client
	Rnd    *rand.Rand
	Keys   map[string]bool
	Leases []clientv3.LeaseID
	// ValueMin and ValueMax bound a value's size (0: 16 to 415 bytes).
	ValueMin, ValueMax int
	// Expiring: some steps grant a lease of etcd's minimum TTL with keys
	// on it, never renewed: etcd revokes it (its keys deleted) on its
	// own a few seconds later.
	Expiring bool
}

// Key is a random key of the workload's keyspace.
func (w *Workload) Key() string {
	return fmt.Sprintf("/registry/%s/ns%d/obj%02d", []string{"pods", "configmaps", "leases"}[w.Rnd.IntN(3)], w.Rnd.IntN(3), w.Rnd.IntN(20))
}

// Value is a random value (ValueMin to ValueMax bytes).
func (w *Workload) Value() string {
	lo, hi := 16, 416
	if w.ValueMax > 0 {
		lo, hi = w.ValueMin, w.ValueMax+1
	}
	b := make([]byte, lo+w.Rnd.IntN(hi-lo))
	for i := range b {
		b[i] = byte('a' + w.Rnd.IntN(26))
	}
	return string(b)
}

// Existing is a random key the workload wrote and has not deleted.
func (w *Workload) Existing() (string, bool) {
	var ks []string
	for k := range w.Keys {
		ks = append(ks, k)
	}
	if len(ks) == 0 {
		return "", false
	}
	sort.Strings(ks)
	return ks[w.Rnd.IntN(len(ks))], true
}

// Step makes one random change.
func (w *Workload) Step(ctx context.Context) {
	t := w.T
	switch n := w.Rnd.IntN(10); {
	case n < 3:
		k := w.Key()
		if _, err := w.Cli.Put(ctx, k, w.Value()); err != nil {
			t.Fatal(err)
		}
		w.Keys[k] = true
	case n < 4:
		if k, ok := w.Existing(); ok {
			if _, err := w.Cli.Delete(ctx, k); err != nil {
				t.Fatal(err)
			}
			delete(w.Keys, k)
		}
	case n < 6:
		var ops []clientv3.Op
		used := map[string]bool{}
		for range 2 + w.Rnd.IntN(3) {
			k := w.Key()
			if used[k] {
				continue
			}
			used[k] = true
			if w.Keys[k] && w.Rnd.IntN(3) == 0 {
				ops = append(ops, clientv3.OpDelete(k))
				delete(w.Keys, k)
			} else {
				ops = append(ops, clientv3.OpPut(k, w.Value()))
				w.Keys[k] = true
			}
		}
		if _, err := w.Cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			t.Fatal(err)
		}
	case n < 7:
		if k, ok := w.Existing(); ok {
			prefix := k[:strings.LastIndex(k, "/")+1]
			if _, err := w.Cli.Delete(ctx, prefix, clientv3.WithPrefix()); err != nil {
				t.Fatal(err)
			}
			for o := range w.Keys {
				if strings.HasPrefix(o, prefix) {
					delete(w.Keys, o)
				}
			}
		}
	case n < 9 && w.Expiring && w.Rnd.IntN(4) == 0:
		// A lease left to expire, with one or two keys on it.
		l, err := w.Cli.Grant(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		for range 1 + w.Rnd.IntN(2) {
			k := fmt.Sprintf("/registry/events/ns%d/expiring%02d", w.Rnd.IntN(3), w.Rnd.IntN(20))
			if _, err := w.Cli.Put(ctx, k, w.Value(), clientv3.WithLease(l.ID)); err != nil {
				t.Fatal(err)
			}
		}
	case n < 9:
		// A lease granted now or an earlier one; a key attached to it (a
		// new key, or an existing key moved to it).
		if len(w.Leases) == 0 || w.Rnd.IntN(3) == 0 {
			l, err := w.Cli.Grant(ctx, int64(30+w.Rnd.IntN(300)))
			if err != nil {
				t.Fatal(err)
			}
			w.Leases = append(w.Leases, l.ID)
		}
		k := w.Key()
		if _, err := w.Cli.Put(ctx, k, w.Value(), clientv3.WithLease(w.Leases[w.Rnd.IntN(len(w.Leases))])); err != nil {
			t.Fatal(err)
		}
		w.Keys[k] = true
	default:
		if len(w.Leases) > 1 {
			i := w.Rnd.IntN(len(w.Leases))
			id := w.Leases[i]
			w.Leases = append(w.Leases[:i], w.Leases[i+1:]...)
			if _, err := w.Cli.Revoke(ctx, id); err != nil {
				t.Fatal(err)
			}
			w.Forget(ctx)
		}
	}
}

// Forget drops keys the cluster no longer has (revoked or expired leases).
func (w *Workload) Forget(ctx context.Context) {
	for k := range w.Keys {
		r, err := w.Cli.Get(ctx, k)
		if err != nil {
			w.T.Fatal(err)
		}
		if len(r.Kvs) == 0 {
			delete(w.Keys, k)
		}
	}
}

// Record keeps the source's state at rev (LiveState) for after a
// compaction takes it away.
func (s *PITRSource) Record(t testing.TB, rev int64) {
	t.Helper()
	ctx := t.Context()
	g, err := s.Cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Cli.HashKV(ctx, s.C.Endpoints()[0], rev)
	if err != nil {
		t.Fatal(err)
	}
	s.Recorded[rev] = LiveState{KVs: g.Kvs, Hash: h.Hash, Compact: h.CompactRevision}
}

// Live is the source's state at rev: recorded before the compaction,
// read live after it.
func (s *PITRSource) Live(t testing.TB, rev int64) LiveState {
	t.Helper()
	if st, ok := s.Recorded[rev]; ok && rev < s.Compact {
		return st
	}
	if rev < s.Compact {
		t.Fatalf("revision %d was compacted and not recorded", rev)
	}
	ctx := t.Context()
	g, err := s.Cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Cli.HashKV(ctx, s.C.Endpoints()[0], rev)
	if err != nil {
		t.Fatal(err)
	}
	return LiveState{KVs: g.Kvs, Hash: h.Hash, Compact: h.CompactRevision}
}

// StartPITRSource starts etcd, takes the anchor, captures a random
// workload with a compaction and a scheduled snapshot in the middle.
// repo nil is a directory store (StoreDir).
func StartPITRSource(t *testing.T, steps int, repo *repository.Repo) *PITRSource {
	t.Helper()
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	id := NewIdentity(t)
	var storeDir string
	if repo == nil {
		storeDir = t.TempDir()
		repo = DirRepo(t, storeDir)
	}
	s := &PITRSource{C: c, Cli: cli, StoreDir: storeDir, Repo: repo, IDs: []age.Identity{id}, Recorded: map[int64]LiveState{}}
	enc := AgeEncoding(id)
	w := &Workload{T: t, Cli: cli, Rnd: rand.New(rand.NewPCG(13, 7)), Keys: map[string]bool{}}
	// Before the snapshot: keys, a lease with a key on it, a compaction.
	for range 30 {
		w.Step(ctx)
	}
	r, err := cli.Get(ctx, "x")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(ctx, r.Header.Revision-5); err != nil {
		t.Fatal(err)
	}
	s.Anchor = (&Source{C: c}).Backup(t, s.Repo, enc)
	s.Capture = changetest.Start(t, changetest.Options{Client: cli, Repo: s.Repo, Anchor: s.Anchor, Encoding: enc, SegmentRevisions: 7})
	s.Record(t, s.Anchor.Revision)

	rec := func() {
		s.Record(t, Revision(t, cli))
	}
	// A lease that expires with keys on it: etcd revokes it, the keys go.
	short, err := cli.Grant(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/events/short%d", i), "e", clientv3.WithLease(short.ID)); err != nil {
			t.Fatal(err)
		}
		rec()
	}
	for i := range steps {
		w.Step(ctx)
		if i < steps/2 {
			rec()
		}
		if w.Rnd.IntN(10) == 0 {
			s.Through = s.Capture.Sync(t)
			s.Syncs = append(s.Syncs, SyncPoint{At: time.Now(), Through: s.Through})
		}
		if i == steps/3 {
			s.Later = (&Source{C: c}).Backup(t, s.Repo, enc)
			s.Record(t, s.Later.Revision)
		}
		if i == steps/2 {
			// The short lease has expired by now, or does so soon: wait
			// until etcd revoked it (its keys deleted).
			deadline := time.Now().Add(20 * time.Second)
			for {
				g, err := cli.Get(ctx, "/registry/events/short", clientv3.WithPrefix(), clientv3.WithCountOnly())
				if err != nil {
					t.Fatal(err)
				}
				if g.Count == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the 1s lease did not expire in 20s")
				}
				time.Sleep(50 * time.Millisecond) // polling etcd's lessor against a deadline
			}
			rec()
			s.Compact = Revision(t, cli)
			if _, err := cli.Compact(ctx, s.Compact); err != nil {
				t.Fatal(err)
			}
		}
	}
	s.Through = s.Capture.Sync(t)
	s.Syncs = append(s.Syncs, SyncPoint{At: time.Now(), Through: s.Through})
	return s
}

// Revision is the cluster's current revision.
func Revision(t testing.TB, cli *clientv3.Client) int64 {
	r, err := cli.Get(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	return r.Header.Revision
}
