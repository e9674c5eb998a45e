package capture

import (
	"context"
	"errors"
	"strconv"

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
