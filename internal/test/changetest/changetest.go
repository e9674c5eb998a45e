// Package changetest is a test-only change capture: it watches a real
// etcd (internal/etcdtest) from a committed snapshot's revision + 1 and
// writes the events as change segments and progress markers through
// repository, in the layout and chain the capture package writes, so that
// point-in-time restore, log, list, retention and verify can be tested
// without the capture job.
//
// It is deliberately simple and synchronous: Sync drains the watch up to
// the cluster's current revision and stores what it got as segments and
// a marker. It does not handle compaction of the watch, reconnects, a
// lost lock or bounded memory: that is the capture package's job.
package changetest

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// Options configure a Capture.
type Options struct {
	Client *clientv3.Client
	Repo   *repository.Repo
	// Anchor is the generation's committed snapshot; the generation's id
	// is its id and the watch starts at its revision + 1.
	Anchor   *repository.Manifest
	Encoding repository.Encoding
	// Token is the fencing token written (default 1).
	Token int64
	// SegmentRevisions bounds the revisions of one segment (default: all
	// of one Sync in one segment).
	SegmentRevisions int
	// Now stamps each revision's receive time and the markers (time.Now
	// when nil).
	Now func() time.Time
}

// Capture is a running watch and the head of the generation's chain.
type Capture struct {
	o         Options
	cancel    context.CancelFunc
	wch       clientv3.WatchChan
	clusterID uint64
	pending   []repository.Revision
	next      int64 // next revision to store
	seen      int64 // last revision received
	leases    map[int64]bool
	prevHash  string
	lastKey   string
	first     bool
}

// Start starts watching the whole keyspace from the anchor's revision + 1.
func Start(t testing.TB, o Options) *Capture {
	t.Helper()
	if o.Token == 0 {
		o.Token = 1
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	id, err := strconv.ParseUint(o.Anchor.EtcdClusterID, 16, 64)
	if err != nil {
		t.Fatalf("changetest: cluster id %q: %v", o.Anchor.EtcdClusterID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Capture{o: o, cancel: cancel, clusterID: id, next: o.Anchor.Revision + 1, seen: o.Anchor.Revision, leases: map[int64]bool{}, first: true}
	c.wch = o.Client.Watch(clientv3.WithRequireLeader(ctx), "", clientv3.WithPrefix(), clientv3.WithRev(o.Anchor.Revision+1))
	t.Cleanup(c.Stop)
	return c
}

// Stop ends the watch.
func (c *Capture) Stop() { c.cancel() }

// Generation is the generation's id.
func (c *Capture) Generation() string { return c.o.Anchor.ID }

// Through is the last revision stored.
func (c *Capture) Through() int64 { return c.next - 1 }

// Sync receives every revision up to the cluster's current one, stores
// them as segments and writes a progress marker at the current time. It
// returns the revision now stored through.
func (c *Capture) Sync(t testing.TB) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := c.o.Client.Get(ctx, "changetest-probe-none")
	if err != nil {
		t.Fatalf("changetest: current revision: %v", err)
	}
	cur := resp.Header.Revision
	for c.seen < cur {
		select {
		case wr, ok := <-c.wch:
			if !ok {
				t.Fatalf("changetest: the watch ended at revision %d", c.seen)
			}
			if err := wr.Err(); err != nil {
				t.Fatalf("changetest: watch: %v", err)
			}
			c.receive(t, wr.Events)
		case <-ctx.Done():
			t.Fatalf("changetest: waiting for revision %d (at %d): %v", cur, c.seen, ctx.Err())
		}
	}
	c.flush(t, ctx)
	return c.Through()
}

func (c *Capture) receive(t testing.TB, evs []*clientv3.Event) {
	now := c.o.Now()
	for _, ev := range evs {
		rev := ev.Kv.ModRevision
		if n := len(c.pending); n == 0 || c.pending[n-1].Revision != rev {
			if rev != c.seen+1 {
				t.Fatalf("changetest: revision %d after %d: a revision without events", rev, c.seen)
			}
			c.pending = append(c.pending, repository.Revision{Revision: rev, Received: now})
			c.seen = rev
		}
		r := &c.pending[len(c.pending)-1]
		op := repository.Op{Key: append([]byte(nil), ev.Kv.Key...)}
		if ev.Type == mvccpb.DELETE {
			op.Delete = true
		} else {
			op.Value = append([]byte(nil), ev.Kv.Value...)
			op.Lease, op.CreateRevision, op.Version = ev.Kv.Lease, ev.Kv.CreateRevision, ev.Kv.Version
		}
		r.Ops = append(r.Ops, op)
	}
}

func (c *Capture) flush(t testing.TB, ctx context.Context) {
	for len(c.pending) > 0 {
		n := len(c.pending)
		if c.o.SegmentRevisions > 0 && n > c.o.SegmentRevisions {
			n = c.o.SegmentRevisions
		}
		revs := c.pending[:n]
		seg := &repository.Segment{SegmentHeader: repository.SegmentHeader{
			Format: repository.SegmentFormat, ClusterID: c.clusterID, Generation: c.Generation(),
			First: revs[0].Revision, Last: revs[n-1].Revision, CapturedThrough: revs[n-1].Revision,
			CapturedAt: c.o.Now(), PrevHash: c.prevHash, Token: c.o.Token,
		}, Revisions: revs}
		if c.first {
			seg.SnapshotID, seg.SnapshotRevision = c.o.Anchor.ID, c.o.Anchor.Revision
		}
		for _, r := range revs {
			for _, op := range r.Ops {
				if op.Delete || op.Lease == 0 || c.leases[op.Lease] {
					continue
				}
				c.leases[op.Lease] = true
				ttl := int64(-1)
				if resp, err := c.o.Client.TimeToLive(ctx, clientv3.LeaseID(op.Lease)); err == nil && resp.TTL >= 0 {
					ttl = resp.GrantedTTL
				}
				seg.Leases = append(seg.Leases, repository.Lease{ID: op.Lease, TTL: ttl, Revision: r.Revision})
			}
		}
		o, hash, err := c.o.Repo.PutSegment(ctx, seg, c.o.Encoding)
		if err != nil {
			t.Fatalf("changetest: %v", err)
		}
		c.first = false
		c.prevHash, c.lastKey = hash, o.Key
		c.next = seg.Last + 1
		c.pending = c.pending[n:]
	}
	c.marker(t, ctx, "")
}

func (c *Capture) marker(t testing.TB, ctx context.Context, seal string) {
	p := &repository.Progress{
		Format: repository.ProgressFormat, Generation: c.Generation(), ClusterID: fmt.Sprintf("%x", c.clusterID),
		SnapshotID: c.o.Anchor.ID, SnapshotRevision: c.o.Anchor.Revision, Through: c.Through(), At: c.o.Now(),
		LastSegment: c.lastKey, LastHash: c.prevHash, Token: c.o.Token, Sealed: seal != "", SealReason: seal,
	}
	if _, err := c.o.Repo.PutProgress(ctx, p); err != nil {
		t.Fatalf("changetest: %v", err)
	}
}

// Seal syncs, then writes a sealed marker: the generation ends.
func (c *Capture) Seal(t testing.TB, reason string) {
	t.Helper()
	c.Sync(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c.marker(t, ctx, reason)
	c.Stop()
}
