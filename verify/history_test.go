package verify_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/etcdutl/v3/etcdutl"
	"go.etcd.io/etcd/pkg/v3/traceutil"
	"go.etcd.io/etcd/server/v3/lease"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// historyOptions shape a random history written straight into etcd's mvcc
// store (the storage engine of a real member, without raft): much faster
// than through a server, so many histories can be checked.
type historyOptions struct {
	ops, keys   int  // operations, and the size of the key space
	maxValue    int  // largest value; some values span overflow pages
	compactions int  // compactions at random revisions
	deleteAll   bool // end by deleting every key (no key alive)
	compactEnd  bool // end with a compaction at the current revision
}

// buildHistory writes a random history and returns the database file.
func buildHistory(tb testing.TB, seed uint64, o historyOptions) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "db")
	lg := zap.NewNop()
	b := backend.NewDefaultBackend(lg, path)
	s := mvcc.NewStore(lg, b, &etcdutl.SimpleLessor{}, mvcc.StoreConfig{})
	rng := rand.New(rand.NewPCG(seed, 99))
	key := func() []byte {
		i := rng.IntN(o.keys)
		return fmt.Appendf(nil, "/registry/%s/ns%d/obj-%d", []string{"pods", "leases", "events"}[i%3], i%7, i)
	}
	value := func() []byte {
		n := rng.IntN(200)
		if rng.IntN(20) == 0 {
			n = rng.IntN(o.maxValue)
		}
		v := make([]byte, n)
		for i := range v {
			v[i] = byte(rng.Uint32())
		}
		return v
	}
	compact := func(rev int64) {
		ch, err := s.Compact(traceutil.TODO(), rev)
		if err != nil {
			if errors.Is(err, mvcc.ErrCompacted) {
				return
			}
			tb.Fatalf("compact %d: %v", rev, err)
		}
		<-ch
	}
	compactAt := map[int]bool{}
	for range o.compactions {
		compactAt[rng.IntN(o.ops)] = true
	}
	var lastCompact int64
	for i := range o.ops {
		switch n := rng.IntN(100); {
		case n < 65:
			s.Put(key(), value(), lease.NoLease)
		case n < 85:
			s.DeleteRange(key(), nil)
		case n < 90:
			k := key()
			s.DeleteRange(k[:len(k)-1], append(k[:len(k)-1:len(k)-1], 0xff))
		default: // a transaction of several changes: sub revisions
			txn := s.Write(traceutil.TODO())
			for range 1 + rng.IntN(4) {
				if rng.IntN(3) == 0 {
					txn.DeleteRange(key(), nil)
				} else {
					txn.Put(key(), value(), lease.NoLease)
				}
			}
			txn.End()
		}
		if compactAt[i] && s.Rev() > lastCompact+1 {
			lastCompact += 1 + rng.Int64N(s.Rev()-lastCompact)
			compact(lastCompact)
		}
	}
	if o.deleteAll {
		s.DeleteRange([]byte{0}, []byte{0xff})
	}
	if o.compactEnd {
		compact(s.Rev())
	}
	s.Commit()
	if err := s.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := b.Close(); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestFileRandomHistories checks File against etcdutl's status and etcd's
// mvcc store on many random histories: overwrites, deletes, range deletes,
// transactions, compactions at random revisions (at tombstones too), values
// across overflow pages, and histories that leave no key alive.
func TestFileRandomHistories(t *testing.T) {
	shapes := []struct {
		name string
		o    historyOptions
	}{
		{"small key space", historyOptions{ops: 800, keys: 30, maxValue: 9000, compactions: 3}},
		{"large key space", historyOptions{ops: 3000, keys: 2000, maxValue: 20000, compactions: 2}},
		{"never compacted", historyOptions{ops: 1000, keys: 100, maxValue: 5000}},
		{"many compactions", historyOptions{ops: 1500, keys: 60, maxValue: 5000, compactions: 20}},
		{"compacted at the end", historyOptions{ops: 800, keys: 50, maxValue: 5000, compactions: 2, compactEnd: true}},
		{"everything deleted", historyOptions{ops: 800, keys: 50, maxValue: 5000, compactions: 2, deleteAll: true}},
		{"everything deleted then compacted", historyOptions{ops: 800, keys: 50, maxValue: 5000, compactions: 2, deleteAll: true, compactEnd: true}},
	}
	for _, sh := range shapes {
		for seed := range uint64(3) {
			t.Run(fmt.Sprintf("%s/%d", sh.name, seed), func(t *testing.T) {
				t.Parallel()
				path := buildHistory(t, seed, sh.o)
				st := checkAgainstEtcdutl(t, path)
				if sh.o.deleteAll && st.TotalKeys != 0 {
					t.Errorf("TotalKeys = %d after deleting everything", st.TotalKeys)
				}
				if (sh.o.compactions > 0 || sh.o.compactEnd) != (st.CompactRevision > 0) {
					t.Errorf("CompactRevision = %d", st.CompactRevision)
				}
				checkAgainstMVCC(t, path, st)
			})
		}
	}
}

// cancelAfter is a context that reports cancellation once Err has been
// asked n times: it cancels File deep inside its pass over the file.
type cancelAfter struct {
	context.Context
	n atomic.Int64
}

func (c *cancelAfter) Err() error {
	if c.n.Add(-1) < 0 {
		return context.Canceled
	}
	return c.Context.Err()
}

func TestFileCancelledMidway(t *testing.T) {
	path := buildHistory(t, 7, historyOptions{ops: 20000, keys: 5000, maxValue: 3000, compactions: 1})
	for _, n := range []int64{1, 2, 3, 5} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ctx := &cancelAfter{Context: t.Context()}
			ctx.n.Store(n)
			_, err := verify.File(ctx, path)
			if !errors.Is(err, context.Canceled) {
				t.Errorf("File cancelled after %d context checks: %v, want context.Canceled", n, err)
			}
		})
	}
}
