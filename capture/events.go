package capture

import (
	"context"
	"fmt"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc"

	"github.com/lifeboat-dev/lifeboat/repository"
)

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

// atFor is the time the capture last knew the cluster at most at rev
// (rev is the durable one): a progress notification's, else the receive
// time of rev itself.
func (c *capt) atFor(rev int64, received time.Time) time.Time {
	if c.knownRev == rev && !c.knownAt.IsZero() {
		return c.knownAt
	}
	return received
}
