package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/lifeboat-dev/lifeboat/repository"
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

// capt is the capture of one generation: the watch stream, the buffered
// changes and the flushing.
//
// # Phases
//
// A capt lives through up to three phases, and its fields keep one
// meaning in all of them:
//
//   - Before its generation's snapshot (prewatch.go; pre and hold set):
//     the stream opened at the cluster's revision R0 and everything it
//     sends is held (memory, then spill) without back-pressure; nothing is
//     handled. lastRev is R0, the stream's start.
//   - Capturing (loop): lastRev starts at the generation's durable
//     revision (its snapshot's S, or what a resumed generation stored);
//     hold is cleared. When the stream came from before the snapshot (pre),
//     skipRev = S: the held events through S are in the snapshot.
//   - After a broken stream (openStream): the new stream starts at lastRev
//     (so that an idle cluster answers progress requests), skipRev =
//     lastRev, the fragmented revision not yet closed (open) is dropped
//     and sent again whole, and what the old stream queued is dropped
//     (closeStream; pre is cleared).
//
// # Invariants (checked after every handled item by the tests: invariants)
//
//  1. g.durable <= lastRev, and pend holds exactly the revisions
//     g.durable+1 … lastRev, dense and in order: every revision up to
//     lastRev is stored (snapshot or segments) or pending.
//  2. open is nil or assembles revision lastRev+1.
//  3. skipRev is 0 or equals lastRev. An event is dropped (event) only
//     when its revision is at most skipRev, that is at most lastRev: it is
//     stored or pending already (invariant 1), so a dropped event is never
//     lost. skipRev returns to 0 at the first event above it, and lastRev
//     moves only after that (closeRev needs an open revision).
//  4. knownRev <= lastRev, and at knownAt the cluster was at knownRev: a
//     progress notification (which never moves it past lastRev: one above
//     is a broken chain, one below a restored cluster) or a whole response
//     whose header says lastRev. Markers and recovery points take their
//     time from it (atFor), never from a revision not yet received.
//  5. hold is set only before the generation started (prewatch); from loop
//     on the reader stops at MaxBufferBytes and gRPC's flow control holds
//     etcd back. A progress notification below skipRev is ignored only
//     while pre: that stream opened below the snapshot on purpose.
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
				c.mustHold()
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
			c.mustHold()
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
