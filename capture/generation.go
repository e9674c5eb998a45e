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
		// A writer with a higher token wrote here. Tokens increase
		// from holder to holder of one lock, but not across a switch
		// from no lock (the start time in ns) to the lock (an election
		// key's create revision), nor across etcd restored to an older
		// revision: refusing would wedge capture forever. The job holds
		// the lock now (Token says so), so it starts a new generation;
		// a stale writer that really still runs writes into this old
		// one, which the new generation does not continue.
		p, err := repo.ReadProgress(ctx, w.Markers[n-1])
		if err != nil {
			return nil, fmt.Errorf("capture: continue generation %s: %w", w.Generation, err)
		}
		if tok, ok := r.job.Token(); ok && p.Token > tok {
			r.lg.Warn("capture: not continuing the newest generation: it was written with a higher fencing token (the lock mode changed, or etcd was restored to an older revision); starting a new one",
				"generation", w.Generation, "stored_token", p.Token, "token", tok)
			return nil, nil
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

// fresh starts a new generation: on the store's newest committed backup
// when it is no generation's anchor yet and etcd still holds the history
// after it (anchorOn: no snapshot, no gap after it), else on a new
// snapshot (retrying with backoff until ctx ends or the lock is lost).
func (r *runner) fresh(ctx context.Context) (*generation, error) {
	if _, ok := r.job.Token(); !ok {
		return nil, ErrLockLost
	}
	// The watch opens before the snapshot and holds what it receives
	// while the snapshot is stored (prewatch.go). It opens before the
	// look for a stored backup too, so that a backup committed while it
	// opens (the agent's start snapshot) is found.
	pre := r.prewatch(ctx)
	defer func() {
		if pre != nil {
			pre.close()
		}
	}()
	if g := r.adopt(ctx); g != nil {
		r.lg.Info("capture: new generation on a committed backup", "generation", g.id, "revision", g.snapRev)
		r.started(g)
		return g, nil
	}
	b := newBackoff(r.job.Interval)
	for {
		if _, ok := r.job.Token(); !ok {
			return nil, ErrLockLost
		}
		if pre == nil {
			pre = r.prewatch(ctx)
		}
		m, err := r.job.Snapshot(ctx)
		if err == nil {
			err = r.notAnchor(ctx, m)
		}
		if err == nil {
			var g *generation
			if g, err = fromSnapshot(m); err == nil {
				r.pre, pre = pre.handOver(g), nil
				r.lg.Info("capture: new generation", "generation", g.id, "revision", g.snapRev)
				r.started(g)
				return g, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// What the watch held is of no use to the next attempt, whose
		// snapshot is newer: a new watch opens before it, so that the
		// spool holds one snapshot's time of changes at most (not a
		// whole outage of the store).
		if pre != nil {
			pre.close()
			pre = nil
		}
		err = fmt.Errorf("capture: snapshot for a new generation: %w", err)
		r.lg.Warn("capture: snapshot failed, retrying", "err", err)
		r.report(func(s *Status) { s.Err = err })
		if err := b.wait(ctx); err != nil {
			return nil, err
		}
	}
}

// started reports a new generation.
func (r *runner) started(g *generation) {
	r.report(func(s *Status) {
		s.Running, s.Generation, s.Revision, s.RecoveryPoint, s.Err = true, g.id, g.durable, g.durableAt, nil
	})
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
