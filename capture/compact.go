package capture

import (
	"context"
	"log/slog"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// compactLoop compacts the store's change segments while the job runs:
// every third of the shortest level's span it plans each recoverable
// window (repository.PlanCompaction) and runs the steps, then deletes
// what compacted segments replaced past the grace period. It writes and
// deletes only while the lock is held (Job.Token), like the writer.
// Failures are logged and counted; the next pass tries again. Proven
// damage is not a failure to retry: compaction records it
// (repository.Compact), logs it once as an error naming the object, and
// goes on with the other windows; from the next pass on the window ends
// before the damaged segment (or goes around it), so what is sound is
// still compacted and the damaged range is left alone (it is evidence,
// and a human decides: docs/pitr.md#damage). The window problem, not a
// compaction error, is what alerts (LifeboatCaptureWindowBroken).
func (r *runner) compactLoop(ctx context.Context) {
	p := r.job.Compact.WithDefaults()
	if len(p.Levels) == 0 {
		return
	}
	if r.job.Encoding.Recipients != nil && len(r.job.Identities) == 0 {
		r.lg.Warn("capture: change segments are not compacted: they are encrypted and no identity is configured (identity_file); retention still bounds them by generation")
		return
	}
	t := time.NewTicker(max(p.Levels[0]/3, 100*time.Millisecond))
	defer t.Stop()
	locks := &compactLocks{extended: map[string]bool{}, damaged: map[string]bool{}}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := r.compactOnce(ctx, p, locks); err != nil && ctx.Err() == nil {
			r.job.Stats.CompactErrors.Add(1)
			r.lg.Warn("capture: compaction failed; trying again at the next pass", "err", err)
		}
	}
}

// compactLocks is what the compactor remembers between passes: about
// Object Lock, the stayers whose lock it extended already, and whether it
// said that locked replaced segments wait; and the segments it found
// damaged.
type compactLocks struct {
	extended map[string]bool
	logged   bool
	// damaged are the segments this compactor found damaged: skipped
	// even when the record of it could not be stored.
	damaged map[string]bool
}

// skip reports whether a step takes a segment found damaged, or is a
// step that found damage before (the compacted segment at its name).
func (l *compactLocks) skip(st repository.CompactStep) bool {
	if l.damaged[stepKey(st)] {
		return true
	}
	for _, s := range st.Sources {
		if l.damaged[s.Object.Key] {
			return true
		}
	}
	return false
}

// damage notes the damage err proves, once per object (logged as an
// error: a human decides what to do with it); false when err proves none.
func (l *compactLocks) damage(err error, lg *slog.Logger) bool {
	de := repository.AsDamage(err)
	if de == nil {
		return false
	}
	if !l.damaged[de.Key] {
		l.damaged[de.Key] = true
		lg.Error("capture: compaction found a damaged change segment; it is recorded, left alone and the rest compacted (docs/pitr.md#damage)", "object", de.Key, "err", err)
	}
	return true
}

// forget drops the extended keys no longer in any of ws (deleted, or
// their generation pruned), so that the set stays as small as the
// windows.
func (l *compactLocks) forget(ws []repository.Window) {
	if len(l.extended) == 0 {
		return
	}
	live := map[string]bool{}
	for _, w := range ws {
		for _, s := range w.Segments {
			live[s.Object.Key] = true
		}
		for _, m := range w.Markers {
			live[m.Object.Key] = true
		}
	}
	for k := range l.extended {
		if !live[k] {
			delete(l.extended, k)
		}
	}
}

// compactOnce is one pass over every recoverable window of the store.
// Under Object Lock (Repo.Lock) it also extends the lock of what stays in
// a window past its short lock (repository.ExtendStayers), and a
// replaced segment the store still locks waits for a later pass.
func (r *runner) compactOnce(ctx context.Context, p repository.CompactPolicy, locks *compactLocks) error {
	repo := r.job.Repo
	l, err := repo.List(ctx)
	if err != nil {
		return err
	}
	ws, err := repo.Windows(ctx, l)
	if err != nil {
		return err
	}
	defer locks.forget(ws)
	for _, w := range ws {
		plan := repository.PlanCompaction(w, p, r.job.Now())
		for _, st := range plan.Steps {
			if _, ok := r.job.Token(); !ok {
				return nil
			}
			if locks.skip(st) {
				continue
			}
			out, err := repo.Compact(ctx, st, p, r.job.Encoding, r.job.Identities)
			if locks.damage(err, r.lg) {
				// Not again: the damage may be the compacted segment
				// already at this step's name, not a source.
				locks.damaged[stepKey(st)] = true
				continue
			}
			if err != nil {
				return err
			}
			r.job.Stats.Compacted.Add(int64(len(out)))
			r.lg.Debug("capture: segments compacted", "generation", st.Generation, "level", st.Level,
				"sources", len(st.Sources), "from_revision", st.Sources[0].First, "through_revision", st.Sources[len(st.Sources)-1].Last)
		}
		for _, by := range w.Segments {
			replaced := plan.Replaced[by.Object.Key]
			if len(replaced) == 0 || locks.damaged[by.Object.Key] {
				continue
			}
			if _, ok := r.job.Token(); !ok {
				return nil
			}
			n, pending, err := repo.DeleteReplacedPending(ctx, by, replaced, r.job.Identities)
			r.job.Stats.Replaced.Add(int64(n))
			if locks.damage(err, r.lg) {
				continue
			}
			if err != nil {
				return err
			}
			if pending > 0 && !locks.logged {
				locks.logged = true
				r.lg.Info("capture: replaced segments still under Object Lock wait for their retention to end; compaction deletes them then",
					"generation", w.Generation, "pending", pending)
			}
		}
		if _, ok := r.job.Token(); !ok {
			return nil
		}
		if _, err := repo.ExtendStayers(ctx, w, locks.extended); err != nil {
			return err
		}
	}
	return nil
}

// stepKey names a compaction step by its first and last source.
func stepKey(st repository.CompactStep) string {
	return "step " + st.Sources[0].Object.Key + " " + st.Sources[len(st.Sources)-1].Object.Key
}
