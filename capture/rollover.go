package capture

import (
	"context"
	"errors"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// SealRollover is the seal reason of a generation that rolled over to a
// scheduled snapshot. It is not a gap (the window overlaps the next
// one's, which starts at that snapshot): it is not in GapReasons and no
// Status carries it as Gap.
const SealRollover GapReason = "rollover"

// rolloverTo notes a committed scheduled snapshot to roll over to. One
// of another cluster, at or before the generation's own snapshot, or
// older than the one already noted is ignored.
func (c *capt) rolloverTo(m *repository.Manifest) {
	switch {
	case m == nil || m.ID == c.g.id || m.Revision <= c.g.snapRev:
		return
	case !sameCluster(m, c.g.clusterID):
		c.r.lg.Warn("capture: not rolling over to a snapshot of another cluster", "backup_id", m.ID, "cluster_id", m.EtcdClusterID, "generation", c.g.id)
		return
	case c.rollTo != nil && c.rollTo.Revision >= m.Revision:
		return
	case c.job.RolloverAfter > 0:
		if born, ok := repository.IDTime(c.g.snapID); ok && m.CreatedAt.Sub(born) < c.job.RolloverAfter {
			return
		}
	}
	c.rollTo = m
}

// rollover ends the generation when it has a snapshot to roll over to
// and its stored changes reach that snapshot's revision: what is
// buffered is stored, a sealed marker ("rollover") written, and a
// *rolloverError returned, from which Run starts the next generation at
// the snapshot. The two windows overlap ([S, T] and [S', …] with
// S' <= T), so no revision falls out of every window. Until the changes
// reach S' (capture lags behind the snapshot) nothing happens.
func (c *capt) rollover(ctx context.Context) error {
	m := c.rollTo
	if m == nil || c.lastRev < m.Revision || c.open != nil {
		return nil
	}
	if err := c.flush(ctx, true); err != nil {
		return err
	}
	if c.g.durable < m.Revision {
		return nil
	}
	if ok, err := c.inHistory(ctx, m.Revision); err != nil {
		c.r.lg.Warn("capture: cannot tell whether etcd still has the revisions after the rollover snapshot; trying again at the next tick", "backup_id", m.ID, "err", err)
		return nil
	} else if !ok {
		// The snapshot took longer to store than etcd keeps history: the
		// next generation could not watch from it. This one goes on.
		c.r.lg.Warn("capture: not rolling over: etcd compacted the snapshot's revision before it was committed; the generation goes on until the next scheduled snapshot",
			"backup_id", m.ID, "revision", m.Revision, "generation", c.g.id)
		c.rollTo = nil
		return nil
	}
	if err := c.marker(ctx, c.atFor(c.g.durable, c.g.durableAt), SealRollover); err != nil {
		if errors.Is(err, ErrLockLost) || ctx.Err() != nil {
			return c.stopWith(ctx, err)
		}
		c.r.lg.Warn("capture: rollover marker not stored; trying again at the next tick", "generation", c.g.id, "err", err)
		return nil
	}
	c.closeStream()
	c.r.lg.Info("capture: generation sealed for rollover", "generation", c.g.id, "revision", c.g.durable, "next", m.ID, "next_revision", m.Revision)
	return &rolloverError{m}
}

// sameCluster reports whether backup m is of the cluster with ID id.
func sameCluster(m *repository.Manifest, id uint64) bool {
	got, err := strconv.ParseUint(m.EtcdClusterID, 16, 64)
	return err == nil && got == id
}

// inHistory reports whether etcd still serves revision rev (a range read
// at it: ErrCompacted says no), so that a generation starting there can
// watch every revision after it.
func (c *capt) inHistory(ctx context.Context, rev int64) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var rpcErr error
	err := c.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		_, rpcErr = pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte{0}, Revision: rev, Limit: 1, CountOnly: true})
		return rpcErr
	})
	switch {
	case err == nil:
		return true, nil
	case rpcErr != nil && rpctypes.Error(rpcErr) == rpctypes.ErrCompacted:
		return false, nil
	}
	return false, err
}
