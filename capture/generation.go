package capture

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// generation is the chain being written.
type generation struct {
	id        string
	clusterID uint64
	snapID    string
	snapRev   int64
	// durable is the captured-through revision of the stored segments;
	// durableAt when the capture last knew the cluster at most there.
	durable   int64
	durableAt time.Time
	// prevHash and lastKey are the last stored segment's hash and key
	// ("" before the first segment).
	prevHash, lastKey string
	// leases seen on a PUT in this generation (by this run).
	leases map[int64]bool
	// markers are this generation's unsealed markers, oldest first: the
	// newest is kept, older ones are deleted once superseded.
	markers []string
	// markerThrough and markerAt are the newest marker's.
	markerThrough int64
	markerAt      time.Time
}

func (g *generation) clusterHex() string { return strconv.FormatUint(g.clusterID, 16) }

// fromSnapshot starts a generation at the committed backup m.
func fromSnapshot(m *repository.Manifest) (*generation, error) {
	id, err := strconv.ParseUint(m.EtcdClusterID, 16, 64)
	if err != nil {
		return nil, fmt.Errorf("backup %s: cluster ID %q: %w", m.ID, m.EtcdClusterID, err)
	}
	return &generation{
		id: m.ID, clusterID: id, snapID: m.ID, snapRev: m.Revision,
		durable: m.Revision, durableAt: m.RevisionTime(), leases: map[int64]bool{},
	}, nil
}

// resume returns the newest generation of the store when it can be
// continued: not sealed, anchored on an intact committed backup, its
// segments an unbroken run. nil (and no error) when there is none to
// continue; an error when the store cannot be read.
func (r *runner) resume(ctx context.Context) (*generation, error) {
	repo := r.job.Repo
	l, err := repo.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("capture: list backups: %w", err)
	}
	ws, err := repo.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("capture: list generations: %w", err)
	}
	if len(ws) == 0 {
		return nil, nil
	}
	w := ws[len(ws)-1]
	why := ""
	switch {
	case w.Sealed:
		why = "it is sealed (" + w.SealReason + ")"
	case w.Anchor == nil || w.Problem != "":
		why = w.Problem
	case len(w.Stray) > 0:
		why = fmt.Sprintf("%d stray objects under it", len(w.Stray))
	}
	if why != "" {
		r.lg.Info("capture: not continuing the newest generation", "generation", w.Generation, "reason", why)
		return nil, nil
	}
	g, err := fromSnapshot(w.Anchor)
	if err != nil {
		return nil, fmt.Errorf("capture: continue generation %s: %w", w.Generation, err)
	}
	g.durable, g.durableAt = w.Through, w.ThroughTime
	for _, m := range w.Markers {
		if m.Sealed {
			continue
		}
		g.markers = append(g.markers, m.Object.Key)
		if m.Through == w.Through && m.At.After(g.markerAt) {
			g.markerThrough, g.markerAt = m.Through, m.At
		}
	}
	if n := len(w.Markers); n > 0 {
		// A writer with a higher token wrote here: this one is stale.
		p, err := repo.ReadProgress(ctx, w.Markers[n-1])
		if err != nil {
			return nil, fmt.Errorf("capture: continue generation %s: %w", w.Generation, err)
		}
		if tok, ok := r.job.Token(); ok && p.Token > tok {
			return nil, fmt.Errorf("capture: generation %s was written with fencing token %d, above this writer's %d: %w", w.Generation, p.Token, tok, ErrLockLost)
		}
	}
	if n := len(w.Segments); n > 0 {
		last := w.Segments[n-1]
		sum, err := repo.ChainHash(ctx, last, r.job.Identities)
		if err != nil {
			return nil, fmt.Errorf("capture: continue generation %s: %w", w.Generation, err)
		}
		g.prevHash, g.lastKey = sum, last.Object.Key
	}
	return g, nil
}

// fresh takes a new snapshot (retrying with backoff until ctx ends or the
// lock is lost) and starts a generation at it.
func (r *runner) fresh(ctx context.Context) (*generation, error) {
	b := newBackoff(r.job.Interval)
	for {
		if _, ok := r.job.Token(); !ok {
			return nil, ErrLockLost
		}
		m, err := r.job.Snapshot(ctx)
		if err == nil {
			var g *generation
			if g, err = fromSnapshot(m); err == nil {
				r.lg.Info("capture: new generation", "generation", g.id, "revision", g.snapRev)
				r.report(func(s *Status) {
					s.Running, s.Generation, s.Revision, s.RecoveryPoint, s.Err = true, g.id, g.durable, g.durableAt, nil
				})
				return g, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		err = fmt.Errorf("capture: snapshot for a new generation: %w", err)
		r.lg.Warn("capture: snapshot failed, retrying", "err", err)
		r.report(func(s *Status) { s.Err = err })
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// backoff doubles a wait from 100ms up to max(interval, 1s), capped at 30s.
type backoff struct{ d, max time.Duration }

func newBackoff(interval time.Duration) *backoff {
	return &backoff{d: 100 * time.Millisecond, max: min(max(interval, time.Second), 30*time.Second)}
}

func (b *backoff) wait(ctx context.Context) error {
	t := time.NewTimer(b.d)
	defer t.Stop()
	b.d = min(2*b.d, b.max)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
