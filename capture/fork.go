package capture

import (
	"context"
	"fmt"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// forkCheckIntervals is how often, in Job.Intervals, the writer lists its
// generation's head for another writer's segments (and once at its first
// tick): one listing of the generation's own prefix, not one per flush.
const forkCheckIntervals = 10

// checkFork looks for another writer's segments in the generation: an
// old leader's in-flight put that lands after this writer resumed gives
// two level-0 segments from the resumed revision + 1, and the window
// ends before them (repository.Window.Problem), while this writer's own
// chain goes on and would keep advancing the capture revision and the
// recovery point over revisions no restore reaches. It returns a
// *gapError (GapBrokenChain) for a fork; a failed listing is logged and
// tried again at the next check.
func (c *capt) checkFork(ctx context.Context) error {
	now := c.job.Now()
	if now.Before(c.forkNext) {
		return nil
	}
	c.forkNext = now.Add(forkCheckIntervals * c.job.Interval)
	segs, _, err := c.job.Repo.ListSegments(ctx, c.g.id)
	if err != nil {
		c.r.lg.Warn("capture: cannot list the generation's segments to check for another writer", "generation", c.g.id, "err", err)
		return nil
	}
	if why := forked(segs, c.forkBase, c.g.durable); why != "" {
		return &gapError{GapBrokenChain, fmt.Errorf("generation %s: %s", c.g.id, why)}
	}
	return nil
}

// forked says how segs (a generation's listing) hold another writer's
// level-0 segment after base, the revision this writer resumed at, when
// its own chain is durable through durable: two starting at one
// revision, or one starting after durable. "" when none. Compacted
// segments (level ≥ 1) are compaction's, never a fork.
func forked(segs []repository.SegmentInfo, base, durable int64) string {
	first := map[int64]string{}
	for _, s := range segs {
		if s.Level != 0 || s.First <= base {
			continue
		}
		if k, ok := first[s.First]; ok {
			return fmt.Sprintf("two segments start at revision %d (%s, %s): another writer forked the chain", s.First, k, s.Object.Key)
		}
		first[s.First] = s.Object.Key
		if s.First > durable {
			return fmt.Sprintf("segment %s starts after the captured revision %d: another writer stored it", s.Object.Key, durable)
		}
	}
	return ""
}
