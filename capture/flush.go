package capture

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

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
