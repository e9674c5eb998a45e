package capture

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"
)

// item is one read from the watch stream.
type item struct {
	resp *pb.WatchResponse
	at   time.Time
	size int64
	err  error
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
