package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// runner is one Run.
type runner struct {
	job Job
	lg  *slog.Logger

	mu sync.Mutex
	st Status

	// pre is the watch opened before a new generation's snapshot, for
	// that generation (prewatch.go).
	pre *capt
}

// report applies f to the status and hands a copy to Job.Report.
func (r *runner) report(f func(*Status)) {
	r.mu.Lock()
	f(&r.st)
	st := r.st
	r.st.Gap = "" // Gap is on the one report that announces it
	r.mu.Unlock()
	if r.job.Report != nil {
		r.job.Report(st)
	}
}

func (r *runner) run(ctx context.Context) error {
	if _, ok := r.job.Token(); !ok {
		return ErrLockLost
	}
	g, err := r.resume(ctx)
	for b := newBackoff(r.job.Interval); err != nil; g, err = r.resume(ctx) {
		if errors.Is(err, ErrLockLost) || ctx.Err() != nil {
			return err
		}
		r.lg.Warn("capture: store not readable, retrying", "err", err)
		r.report(func(s *Status) { s.Err = err })
		if werr := b.wait(ctx); werr != nil {
			return werr
		}
	}
	started := g == nil
	if !started {
		r.lg.Info("capture: continuing generation", "generation", g.id, "revision", g.durable)
		r.report(func(s *Status) {
			s.Running, s.Generation, s.Revision, s.RecoveryPoint = true, g.id, g.durable, g.durableAt
		})
	} else if g, err = r.fresh(ctx); err != nil {
		return err
	}
	for {
		c := r.captFor(g)
		if started {
			// A start marker at the snapshot's revision and time: the
			// next writer (after a lost lock or a crash) finds the
			// generation and continues it even before its first segment.
			if err := c.marker(ctx, g.durableAt, ""); err != nil {
				r.lg.Warn("capture: progress marker not stored", "generation", g.id, "err", err)
			}
		}
		err := c.loop(ctx)
		var ro *rolloverError
		if errors.As(err, &ro) {
			// The new generation continues from the scheduled snapshot:
			// its watch replays the revisions after it from etcd.
			if g, err = fromSnapshot(ro.m); err != nil {
				return err
			}
			r.job.Stats.Rollovers.Add(1)
			r.lg.Info("capture: rolled over to a new generation", "generation", g.id, "revision", g.snapRev)
			started = true
			continue
		}
		var gap *gapError
		if !errors.As(err, &gap) {
			return err
		}
		if g, err = r.fresh(ctx); err != nil {
			return err
		}
		started = true
	}
}

// rolloverError ends a generation that rolled over to the committed
// snapshot m: sealed ("rollover") once its changes reached m's revision.
type rolloverError struct{ m *repository.Manifest }

func (e *rolloverError) Error() string { return "capture: rolled over to snapshot " + e.m.ID }

// gapError ends a generation: it was sealed (or could not be, said in
// the log) for reason.
type gapError struct {
	reason GapReason
	err    error
}

func (e *gapError) Error() string { return fmt.Sprintf("capture gap (%s): %v", e.reason, e.err) }
func (e *gapError) Unwrap() error { return e.err }

// item is one read from the watch stream.
type item struct {
	resp *pb.WatchResponse
	at   time.Time
	size int64
	err  error
}

// capt is the capture of one generation: the watch stream, the buffered
// changes and the flushing.
type capt struct {
	r   *runner
	g   *generation
	job *Job

	// The queue between the stream's reader and the loop.
	qmu   sync.Mutex
	queue []item
	ready chan struct{} // items queued
	room  chan struct{} // bytes freed
	// sp holds the items beyond the memory bound while hold is set
	// (the generation's snapshot is being stored) and until they are
	// read back; pre says the stream opened before the snapshot, at a
	// revision at or below it (prewatch.go).
	sp       spill
	hold     atomic.Bool
	pre      bool
	synced   chan struct{} // closed at the first progress notification (prewatch)
	syncSeen bool
	// held is what the reader's bound counts: queued responses plus
	// closed, unstored revisions (bytes).
	hmu  sync.Mutex
	held int64

	stream     pb.Watch_WatchClient
	stopStream func()
	readers    sync.WaitGroup

	// Buffered changes: closed revisions not yet stored, and the
	// revision being assembled from a fragmented response. The leases
	// first seen in the open revision are kept apart (openLeases) until
	// it closes: a segment holds only its own revisions' leases.
	pend       []repository.Revision
	pendLeases []repository.Lease
	pendBytes  int64
	open       *repository.Revision
	openLeases []repository.Lease
	openBytes  int64
	lastRev    int64 // the highest closed revision received
	skipRev    int64 // events through this revision are already captured (0: none)
	// tried holds the hashes of the encodings of the segment at key
	// triedKey this writer put (a put may land with its reply lost).
	triedKey string
	tried    []string
	// knownRev/knownAt: at knownAt the cluster was at revision knownRev
	// (a progress notification, or a response whose header says so).
	knownRev int64
	knownAt  time.Time
	// forkBase is the revision this capture started at; forkNext when
	// it next lists the generation for another writer's segments
	// (fork.go).
	forkBase int64
	forkNext time.Time
	// rollTo is the scheduled snapshot the generation rolls over to once
	// its changes reach the snapshot's revision (nil: none).
	rollTo *repository.Manifest
}

func (c *capt) addHeld(n int64) {
	c.hmu.Lock()
	c.held += n
	total := c.held + c.openBytes
	c.hmu.Unlock()
	st := c.job.Stats
	st.BufferedBytes.Store(total)
	for {
		p := st.PeakBufferedBytes.Load()
		if total <= p || st.PeakBufferedBytes.CompareAndSwap(p, total) {
			break
		}
	}
	if n < 0 {
		select {
		case c.room <- struct{}{}:
		default:
		}
	}
}

func (c *capt) heldBytes() int64 {
	c.hmu.Lock()
	defer c.hmu.Unlock()
	return c.held
}

// loop captures the generation until ctx ends, the lock is lost or a gap
// seals it (a *gapError).
func (c *capt) loop(ctx context.Context) error {
	if c.ready == nil {
		c.ready = make(chan struct{}, 1)
		c.room = make(chan struct{}, 1)
	}
	c.lastRev, c.knownRev, c.knownAt = c.g.durable, c.g.durable, c.g.durableAt
	if c.pre {
		c.skipRev = c.lastRev // the stream opened below the snapshot
	}
	c.hold.Store(false) // back-pressure from here on
	c.forkBase = c.g.durable
	defer c.closeSpill()
	defer c.closeStream()
	tick := time.NewTicker(c.job.Interval)
	defer tick.Stop()
	b := newBackoff(c.job.Interval)
	for {
		if c.stream == nil {
			if err := c.openStream(ctx); err != nil {
				if ctx.Err() != nil {
					return c.stop()
				}
				c.r.lg.Warn("capture: watch failed, retrying", "err", err)
				c.r.report(func(s *Status) { s.Err = err })
				if b.wait(ctx) != nil {
					return c.stop()
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return c.stop()
		case <-c.ready:
			for {
				it, ok := c.next()
				if !ok {
					break
				}
				if err := c.handle(ctx, it); err != nil {
					var gap *gapError
					if errors.As(err, &gap) {
						return c.seal(ctx, gap)
					}
					if errors.Is(err, ErrLockLost) || ctx.Err() != nil {
						return c.stopWith(ctx, err)
					}
					// The stream broke: reopen it after the last closed
					// revision; what is buffered stays.
					c.r.lg.Info("capture: watch stream broke, reopening", "revision", c.lastRev, "err", err)
					c.closeStream()
					c.job.Stats.Reconnects.Add(1)
					if b.wait(ctx) != nil {
						return c.stop()
					}
					break
				}
				b = newBackoff(c.job.Interval)
			}
		case m := <-c.job.Rollover:
			c.rolloverTo(m)
		case <-tick.C:
			if err := c.rollover(ctx); err != nil {
				return err
			}
			if err := c.tick(ctx); err != nil {
				var gap *gapError
				if errors.As(err, &gap) {
					return c.seal(ctx, gap)
				}
				return c.stopWith(ctx, err)
			}
		}
	}
}

func (c *capt) stopWith(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ErrLockLost) {
		return c.stop()
	}
	return err
}

// stop stores what is buffered, within a few seconds, when the lock is
// still held: ctx ended (the agent stops).
func (c *capt) stop() error {
	c.closeStream()
	if len(c.pend) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.flush(ctx, false); err != nil {
			c.r.lg.Warn("capture: changes not stored at stop", "revisions", len(c.pend), "err", err)
			return err
		}
	}
	return context.Canceled
}

// next takes the next queued item.
func (c *capt) next() (item, bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if len(c.queue) == 0 {
		return c.unspill()
	}
	it := c.queue[0]
	c.queue[0] = item{}
	c.queue = c.queue[1:]
	return it, true
}

// openStream opens the watch of the whole keyspace after the last closed
// revision and starts its reader. A fragmented revision not yet closed
// is dropped: the new stream sends it again whole.
func (c *capt) openStream(ctx context.Context) error {
	if c.open != nil {
		c.hmu.Lock()
		c.openBytes = 0
		c.hmu.Unlock()
		c.open = nil
		// Its leases are first seen again when it is sent again.
		for _, l := range c.openLeases {
			delete(c.g.leases, l.ID)
		}
		c.openLeases = nil
	}
	sctx, cancel := context.WithCancel(ctx)
	var first *pb.WatchResponse
	// The watch starts at the last captured revision, not after it:
	// etcd answers a progress request only when no watcher of the
	// stream starts in the future, so a watch from lastRev+1 on an idle
	// cluster would never hear one. The events of lastRev itself are
	// dropped (skipRev).
	start := c.lastRev
	c.skipRev = start
	err := c.job.Session.Conn(sctx, func(ctx context.Context, ep string, conn *grpc.ClientConn) error {
		s, err := pb.NewWatchClient(conn).Watch(ctx)
		if err != nil {
			return err
		}
		err = s.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{
			Key: []byte{0}, RangeEnd: []byte{0}, StartRevision: start, ProgressNotify: true, Fragment: true,
		}}})
		if err != nil {
			return err
		}
		// The created response says whether the member accepted the
		// watch: a stale auth token is refused there, and Conn logs in
		// again for those errors.
		timer := time.AfterFunc(30*time.Second, cancel)
		resp, err := s.Recv()
		timer.Stop()
		if err != nil {
			return err
		}
		if resp.Canceled && resp.CompactRevision == 0 {
			return cancelError(resp.CancelReason)
		}
		c.stream, first = s, resp
		c.r.lg.Debug("capture: watching", "endpoint", ep, "revision", start)
		return nil
	})
	if err != nil {
		cancel()
		return fmt.Errorf("capture: watch from revision %d: %w", start, err)
	}
	c.stopStream = cancel
	c.push(item{resp: first, at: c.job.Now(), size: respSize(first)})
	c.readers.Add(1)
	go c.read(sctx, c.stream)
	return nil
}

// cancelError is the error of a watch the member refused, as the
// session's token renewal recognizes it.
func cancelError(reason string) error {
	for _, e := range [][2]error{
		{rpctypes.ErrGRPCInvalidAuthToken, rpctypes.ErrInvalidAuthToken},
		{rpctypes.ErrGRPCAuthOldRevision, rpctypes.ErrAuthOldRevision},
		{rpctypes.ErrGRPCUserEmpty, rpctypes.ErrUserEmpty},
	} {
		if reason == e[0].Error() || reason == rpctypes.ErrorDesc(e[1]) {
			return fmt.Errorf("watch refused by the member: %w", e[1])
		}
	}
	return fmt.Errorf("watch refused by the member: %s", reason)
}

// push queues an item for the loop.
func (c *capt) push(it item) {
	c.qmu.Lock()
	if c.divert(it) {
		c.qmu.Unlock()
		c.signal()
		return
	}
	c.queue = append(c.queue, it)
	c.qmu.Unlock()
	c.addHeld(it.size)
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

func (c *capt) closeStream() {
	if c.stream == nil {
		return
	}
	c.stopStream()
	c.readers.Wait()
	c.stream = nil
	// Drop what the old stream queued: the new one starts after the
	// last closed revision.
	c.qmu.Lock()
	var n int64
	for _, it := range c.queue {
		n += it.size
	}
	c.queue = nil
	c.sp.reset()
	c.qmu.Unlock()
	c.pre = false
	c.addHeld(-n)
}

// read receives from stream while the buffer has room. Past
// MaxBufferBytes it stops calling Recv: gRPC's flow control then stops
// the member from sending (etcd moves the watcher to its slow path and
// catches it up from its store later).
func (c *capt) read(ctx context.Context, s pb.Watch_WatchClient) {
	defer c.readers.Done()
	for {
		for !c.hold.Load() && c.heldBytes()+c.spilledBytes() >= c.job.MaxBufferBytes {
			select {
			case <-c.room:
			case <-ctx.Done():
				return
			}
		}
		resp, err := s.Recv()
		it := item{resp: resp, at: c.job.Now(), err: err}
		if err == nil {
			it.size = respSize(resp)
		}
		c.push(it)
		if err != nil {
			return
		}
	}
}

// handle processes one item. It returns a *gapError for a gap,
// ErrLockLost, or another error when the stream broke.
func (c *capt) handle(ctx context.Context, it item) error {
	c.addHeld(-it.size)
	if it.err != nil {
		return it.err
	}
	resp := it.resp
	if done, err := c.control(ctx, resp); done || err != nil {
		return err
	}
	if len(resp.Events) == 0 {
		return c.progress(resp.Header.GetRevision(), it.at)
	}
	for _, ev := range resp.Events {
		if err := c.event(ctx, ev, it.at); err != nil {
			return err
		}
	}
	if !resp.Fragment {
		if err := c.closeRev(ctx); err != nil {
			return err
		}
		if resp.Header.GetRevision() == c.lastRev {
			c.knownRev, c.knownAt = c.lastRev, it.at
		}
	}
	return nil
}

// control handles what a response says about the watch itself (another
// cluster, compaction, cancellation, creation); done when there is
// nothing more in it.
func (c *capt) control(ctx context.Context, resp *pb.WatchResponse) (done bool, err error) {
	if h := resp.Header; h != nil && h.ClusterId != 0 && h.ClusterId != c.g.clusterID {
		return true, &gapError{GapClusterID, fmt.Errorf("the cluster answering has ID %x, generation %s is of %x", h.ClusterId, c.g.id, c.g.clusterID)}
	}
	if resp.CompactRevision != 0 {
		return true, &gapError{GapCompacted, fmt.Errorf("etcd compacted through revision %d, the watch needed %d", resp.CompactRevision, c.lastRev+1)}
	}
	if resp.Canceled {
		return true, fmt.Errorf("watch canceled by the member: %s", resp.CancelReason)
	}
	if resp.Created {
		// The member's revision when it accepted the watch: below the
		// captured one, the cluster went back (restored in place, its ID
		// kept), and etcd will say nothing more until it passes the
		// watch's start revision.
		// A stream opened before the generation's snapshot (prewatch)
		// was created below it on purpose.
		if h := resp.Header.GetRevision(); h < c.lastRev && !c.pre {
			return true, c.confirmBackwards(ctx, h)
		}
		return true, nil
	}
	return false, nil
}

// progress handles a progress notification at revision h, received at
// at: every revision through h was sent.
func (c *capt) progress(h int64, at time.Time) error {
	switch {
	case c.pre && c.skipRev != 0 && h < c.skipRev:
		return nil // the stream opened below the snapshot (prewatch)
	case c.open != nil:
		return fmt.Errorf("progress notification at revision %d inside fragmented revision %d", h, c.open.Revision)
	case h < c.lastRev:
		return &gapError{GapRevisionBackwards, fmt.Errorf("the cluster is at revision %d, below the captured %d: it was restored", h, c.lastRev)}
	case h > c.lastRev:
		return &gapError{GapBrokenChain, fmt.Errorf("the cluster is at revision %d but the watch delivered only through %d: revisions missing", h, c.lastRev)}
	}
	c.knownRev, c.knownAt = h, at
	return nil
}

// event adds one watch event to the revision being assembled, closing
// the one before when a new revision starts (revisions must be dense).
func (c *capt) event(ctx context.Context, ev *mvccpb.Event, at time.Time) error {
	kv := ev.Kv
	if kv == nil {
		return fmt.Errorf("watch event without a key")
	}
	rev := kv.ModRevision
	if c.skipRev != 0 {
		if rev <= c.skipRev && c.open == nil {
			return nil // captured already: the watch starts there (see openStream, prewatch)
		}
		c.skipRev = 0
	}
	if c.open == nil || rev != c.open.Revision {
		if c.open != nil {
			if err := c.closeRev(ctx); err != nil {
				return err
			}
		}
		switch {
		case rev <= c.lastRev:
			return &gapError{GapRevisionBackwards, fmt.Errorf("revision %d after %d: the cluster's revision went backwards", rev, c.lastRev)}
		case rev != c.lastRev+1:
			return &gapError{GapBrokenChain, fmt.Errorf("revision %d after %d: revisions %d-%d missing from the watch", rev, c.lastRev, c.lastRev+1, rev-1)}
		}
		c.open = &repository.Revision{Revision: rev, Received: at}
	}
	op := repository.Op{Key: kv.Key}
	if ev.Type == mvccpb.DELETE {
		op.Delete = true
	} else {
		op.Value, op.Lease, op.CreateRevision, op.Version = kv.Value, kv.Lease, kv.CreateRevision, kv.Version
		if kv.Lease != 0 && !c.g.leases[kv.Lease] {
			c.g.leases[kv.Lease] = true
			// Its TTL (0: unknown) is looked up at the flush, off the
			// watch's path (lookupLeases).
			c.openLeases = append(c.openLeases, repository.Lease{ID: kv.Lease, Revision: rev})
		}
	}
	c.open.Ops = append(c.open.Ops, op)
	n := int64(len(op.Key) + len(op.Value) + 32)
	c.hmu.Lock()
	c.openBytes += n
	c.hmu.Unlock()
	c.addHeld(0)
	return nil
}

// confirmBackwards checks a watch created at revision h, below the
// captured revision, with a linearizable read: a member that only lags
// (a follower catching up) answers it at the cluster's revision; a
// cluster restored to an older revision answers below the captured one,
// a GapRevisionBackwards.
func (c *capt) confirmBackwards(ctx context.Context, h int64) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var rev int64
	err := c.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		// Serializable false (the default): through the leader's
		// read index, never a member's possibly stale state.
		resp, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte{0}, Limit: 1})
		if err != nil {
			return err
		}
		rev = resp.Header.GetRevision()
		return nil
	})
	if err != nil {
		return fmt.Errorf("capture: confirm the cluster's revision (the watch was created at %d, below the captured %d): %w", h, c.lastRev, err)
	}
	if rev < c.lastRev {
		return &gapError{GapRevisionBackwards, fmt.Errorf("the cluster is at revision %d, below the captured %d: it was restored", rev, c.lastRev)}
	}
	c.r.lg.Info("capture: a member behind the captured revision answers the watch", "member_revision", h, "revision", rev, "captured", c.lastRev)
	return nil
}

// closeRev moves the assembled revision to the pending ones, flushing
// when they reach the segment bound.
func (c *capt) closeRev(ctx context.Context) error {
	if c.open == nil {
		return nil
	}
	c.pend = append(c.pend, *c.open)
	c.pendLeases = append(c.pendLeases, c.openLeases...)
	c.lastRev = c.open.Revision
	c.open, c.openLeases = nil, nil
	c.hmu.Lock()
	n := c.openBytes
	c.openBytes = 0
	c.hmu.Unlock()
	c.pendBytes += n
	c.addHeld(n)
	if c.pendBytes >= c.job.MaxSegmentBytes {
		return c.flush(ctx, true)
	}
	return nil
}

// leaseLookups bounds the lease TTL lookups a flush runs at once.
const leaseLookups = 16

// lookupLeases sets the TTL of every lease of ls not known yet (0),
// asking etcd for up to leaseLookups at once. The TTLs found stay set
// when another lookup fails (a retried flush asks only for the rest).
func (c *capt) lookupLeases(ctx context.Context, ls []repository.Lease) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		first error
	)
	sem := make(chan struct{}, leaseLookups)
	for i := range ls {
		if ls[i].TTL != 0 {
			continue
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
		wg.Go(func() {
			defer func() { <-sem }()
			ttl, err := c.leaseTTL(ctx, ls[i].ID)
			if err != nil {
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				cancel()
				return
			}
			ls[i].TTL = ttl
		})
	}
	wg.Wait()
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	return first
}

// leaseTTL asks for lease id's granted TTL: -1 when the lease is gone
// (expired or revoked before the capture looked).
func (c *capt) leaseTTL(ctx context.Context, id int64) (int64, error) {
	c.job.Stats.LeaseLookups.Add(1)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ttl int64
	err := c.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		resp, err := pb.NewLeaseClient(conn).LeaseTimeToLive(ctx, &pb.LeaseTimeToLiveRequest{ID: id})
		if err != nil {
			return err
		}
		ttl = resp.GrantedTTL
		if resp.TTL == -1 || ttl <= 0 {
			ttl = -1
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("capture: lease %x time to live: %w", id, err)
	}
	return ttl, nil
}

// tick is the interval's work: store what is buffered, or a progress
// marker when idle, and ask for the next progress notification.
func (c *capt) tick(ctx context.Context) error {
	if _, ok := c.job.Token(); !ok {
		return ErrLockLost
	}
	if err := c.checkFork(ctx); err != nil {
		return err
	}
	if len(c.pend) > 0 {
		if err := c.flush(ctx, true); err != nil {
			return err
		}
	} else if c.open == nil && c.knownRev == c.g.durable && c.knownAt.After(c.g.markerAt) {
		if err := c.marker(ctx, c.knownAt, ""); err != nil {
			c.r.lg.Warn("capture: progress marker not stored", "err", err)
			c.r.report(func(s *Status) { s.Err = err })
		} else {
			c.reportDurable(nil)
		}
	}
	if c.stream != nil {
		err := c.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		if err != nil {
			c.r.lg.Debug("capture: progress request failed", "err", err)
		}
	}
	return nil
}

// atFor is the time the capture last knew the cluster at most at rev
// (rev is the durable one): a progress notification's, else the receive
// time of rev itself.
func (c *capt) atFor(rev int64, received time.Time) time.Time {
	if c.knownRev == rev && !c.knownAt.IsZero() {
		return c.knownAt
	}
	return received
}

// flush stores the pending revisions as one segment and then a progress
// marker. A failed put is retried with backoff until ctx ends; the
// changes stay buffered. Another writer's segment at the same name
// (uploader.ErrExists) is a gap, or ErrLockLost when the lock is gone.
func (c *capt) flush(ctx context.Context, retry bool) error {
	if len(c.pend) == 0 {
		return nil
	}
	b := newBackoff(c.job.Interval)
	for {
		err := c.flushOnce(ctx)
		if err == nil {
			return nil
		}
		var gap *gapError
		if errors.As(err, &gap) || errors.Is(err, ErrLockLost) || !retry || ctx.Err() != nil {
			return err
		}
		c.r.lg.Warn("capture: segment not stored, retrying", "err", err)
		c.r.report(func(s *Status) { s.Err = err })
		if b.wait(ctx) != nil {
			return err
		}
	}
}

func (c *capt) flushOnce(ctx context.Context) error {
	tok, ok := c.job.Token()
	if !ok {
		return ErrLockLost
	}
	if err := c.lookupLeases(ctx, c.pendLeases); err != nil {
		return err
	}
	g := c.g
	last := c.pend[len(c.pend)-1]
	at := c.atFor(last.Revision, last.Received)
	s := &repository.Segment{
		SegmentHeader: repository.SegmentHeader{
			Format: repository.SegmentFormat, ClusterID: g.clusterID, Generation: g.id,
			First: c.pend[0].Revision, Last: last.Revision, CapturedThrough: last.Revision, CapturedAt: at,
			PrevHash: g.prevHash, Token: tok,
		},
		Revisions: c.pend, Leases: c.pendLeases,
	}
	if g.prevHash == "" {
		s.SnapshotID, s.SnapshotRevision = g.snapID, g.snapRev
	}
	key := c.job.Repo.SegmentKey(g.id, s.First, s.Last, c.job.Encoding)
	if key != c.triedKey {
		c.triedKey, c.tried = key, nil
	}
	o, sum, err := c.job.Repo.PutSegment(ctx, s, c.job.Encoding)
	if sum != "" {
		c.tried = append(c.tried, sum)
	}
	if errors.Is(err, uploader.ErrExists) {
		if sum, err = c.ownSegment(ctx, key); err != nil {
			return err
		}
		o = uploader.ObjectInfo{Key: key}
	}
	if err != nil {
		return err
	}
	c.triedKey, c.tried = "", nil
	c.job.Stats.Segments.Add(1)
	c.r.lg.Debug("capture: segment stored", "key", o.Key, "revisions", len(c.pend), "bytes", o.Size)
	g.durable, g.durableAt, g.prevHash, g.lastKey = last.Revision, at, sum, o.Key
	freed := c.pendBytes
	c.pend, c.pendLeases, c.pendBytes = nil, nil, 0
	c.addHeld(-freed)
	var merr error
	if err := c.marker(ctx, at, ""); err != nil {
		merr = err
		c.r.lg.Warn("capture: progress marker not stored", "err", err)
	}
	c.reportDurable(merr)
	return nil
}

// ownSegment decides whose is the segment found at key where this writer
// put one: its own when the stored bytes' sha256 is that of bytes it
// encoded for key (an earlier put landed, its reply lost: the retry met
// the object), so the same generation, range, previous hash, token and
// content; it returns that hash, the next PrevHash. Another writer's is a
// gap, or ErrLockLost when the lock is gone.
func (c *capt) ownSegment(ctx context.Context, key string) (string, error) {
	stored, err := c.job.Repo.StoredHash(ctx, key)
	if err != nil {
		return "", fmt.Errorf("capture: a segment exists at %s: %w", key, err)
	}
	if slices.Contains(c.tried, stored) {
		c.r.lg.Info("capture: segment stored by an earlier put whose reply was lost", "key", key)
		return stored, nil
	}
	if _, ok := c.job.Token(); !ok {
		return "", ErrLockLost
	}
	return "", &gapError{GapBrokenChain, fmt.Errorf("another writer stored a segment at %s: %w", key, uploader.ErrExists)}
}

// reportDurable reports the durable point and the recovery point.
func (c *capt) reportDurable(err error) {
	rp := c.atFor(c.g.durable, c.g.durableAt)
	if c.open != nil {
		rp = c.open.Received
	}
	if len(c.pend) > 0 {
		rp = c.pend[0].Received
	}
	c.r.report(func(s *Status) {
		s.Running, s.Generation, s.Revision, s.RecoveryPoint, s.Err = true, c.g.id, c.g.durable, rp, err
	})
}

// marker stores a progress marker at the durable revision and deletes
// the generation's older ones (best effort). sealed is the reason of a
// sealing marker, "" for a plain one.
func (c *capt) marker(ctx context.Context, at time.Time, sealed GapReason) error {
	g := c.g
	if at.IsZero() {
		at = c.job.Now()
	}
	if sealed == "" && g.markerThrough == g.durable && !at.After(g.markerAt) {
		return nil // nothing newer to say
	}
	tok, ok := c.job.Token()
	if !ok {
		return ErrLockLost
	}
	p := &repository.Progress{
		Format: repository.ProgressFormat, Generation: g.id, ClusterID: g.clusterHex(),
		SnapshotID: g.snapID, SnapshotRevision: g.snapRev, Through: g.durable, At: at.UTC(),
		LastSegment: g.lastKey, LastHash: g.prevHash, Token: tok,
		Sealed: sealed != "", SealReason: string(sealed),
	}
	key := c.job.Repo.ProgressKey(p.Generation, p.Through, p.At, p.Sealed)
	_, err := c.job.Repo.PutProgress(ctx, p)
	switch {
	case errors.Is(err, uploader.ErrExists) && sealed != "":
		err = nil // sealed already
	case errors.Is(err, uploader.ErrExists):
		err = c.ownMarker(ctx, key, p)
	case err != nil && !slices.Contains(g.markers, key):
		// It may have landed, its reply lost: deleted like the others
		// once a newer marker is stored.
		g.markers = append(g.markers, key)
	}
	if err != nil {
		return err
	}
	c.job.Stats.Markers.Add(1)
	if sealed != "" {
		return nil
	}
	g.markerThrough, g.markerAt = g.durable, at
	var locked []string
	for _, old := range g.markers {
		if old == key {
			continue
		}
		if c.markerLocked(ctx, old) {
			locked = append(locked, old) // deleted at a later marker
			continue
		}
		if err := c.job.Repo.Store.Delete(ctx, old); err != nil && !errors.Is(err, uploader.ErrNotFound) {
			c.r.lg.Warn("capture: superseded progress marker not deleted", "key", old, "err", err)
		}
	}
	g.markers = append(append(g.markers[:0], locked...), key)
	return nil
}

// markerLocked reports whether a superseded marker is still under Object
// Lock (Repo.Lock): surely while its time plus MarkerFor is ahead (no
// request), else as the store says. A marker whose lock state cannot be
// read counts as locked: it is tried again at the next marker.
func (c *capt) markerLocked(ctx context.Context, key string) bool {
	lock := c.job.Repo.Lock
	if lock.Retention.Mode == "" {
		return false
	}
	now := c.job.Now()
	if _, at, _, err := repository.ParseProgressName(path.Base(key)); err == nil && now.Before(at.Add(lock.MarkerFor())) {
		return true
	}
	locked, err := repository.LockedNow(ctx, c.job.Repo.Store, key, now)
	return err != nil || locked
}

// ownMarker decides whose is the marker found at key where this writer
// put p: its own (an earlier put landed, its reply lost) when the stored
// one says the same as p, else another writer's (ErrExists).
func (c *capt) ownMarker(ctx context.Context, key string, p *repository.Progress) error {
	got, err := c.job.Repo.ReadProgress(ctx, repository.ProgressInfo{
		Generation: p.Generation, Through: p.Through, At: p.At, Sealed: p.Sealed, Object: uploader.ObjectInfo{Key: key},
	})
	if err != nil {
		return fmt.Errorf("capture: a progress marker exists at %s: %w", key, err)
	}
	same := *got
	if same.At.Equal(p.At) {
		same.At = p.At
	}
	if same != *p {
		return fmt.Errorf("capture: another writer stored a progress marker at %s (token %d): %w", key, got.Token, uploader.ErrExists)
	}
	c.r.lg.Info("capture: progress marker stored by an earlier put whose reply was lost", "key", key)
	return nil
}

// seal ends the generation: what is buffered before the gap is stored,
// then a sealed marker; the gap is reported. It returns gap (or
// ErrLockLost, or ctx's end).
func (c *capt) seal(ctx context.Context, gap *gapError) error {
	c.closeStream()
	c.r.lg.Warn("capture: generation sealed", "generation", c.g.id, "revision", c.g.durable, "reason", string(gap.reason), "err", gap.err)
	if len(c.pend) > 0 {
		var inner *gapError
		if err := c.flush(ctx, true); errors.As(err, &inner) {
			gap = inner // another writer: the chain ends where it is stored
		} else if err != nil {
			return c.stopWith(ctx, err)
		}
	}
	b := newBackoff(c.job.Interval)
	for {
		err := c.marker(ctx, c.atFor(c.g.durable, c.g.durableAt), gap.reason)
		if err == nil {
			break
		}
		if errors.Is(err, ErrLockLost) || ctx.Err() != nil {
			return c.stopWith(ctx, err)
		}
		c.r.lg.Warn("capture: sealed marker not stored, retrying", "err", err)
		c.r.report(func(s *Status) { s.Err = err })
		if b.wait(ctx) != nil {
			return c.stopWith(ctx, err)
		}
	}
	c.r.report(func(s *Status) {
		s.Generation, s.Revision, s.Gap, s.Err = c.g.id, c.g.durable, gap.reason, gap
	})
	return gap
}

// respSize is a response's size as the buffer counts it: keys and values
// plus a fixed overhead per event (the same measure as a buffered op).
func respSize(resp *pb.WatchResponse) int64 {
	n := int64(64)
	for _, ev := range resp.Events {
		if ev.Kv != nil {
			n += int64(len(ev.Kv.Key) + len(ev.Kv.Value) + 32)
		}
	}
	return n
}
