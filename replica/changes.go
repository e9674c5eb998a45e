package replica

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// maxChangeObject bounds a segment or marker read whole: capture's
// segments are at most 256 MiB before encoding, compacted ones a level's
// worth of them.
const maxChangeObject = 1 << 30

// maxChangeListings bounds how often one run lists the primary's changes
// and copies them when a segment it listed is gone before it was read.
const maxChangeListings = 3

// changes copies the primary's change windows from a fresh listing,
// unless copying the backups was nothing (DryRun, or no backup copied:
// windows and want, listed at the start of the run, are then fresh
// enough). The primary compacts while a run copies: small segments are
// replaced and, past capture.compaction_grace, deleted, which the
// backups alone can outlast; and a segment listed may go before it is
// read. So on NotFound it lists again and goes on from where the copy's
// window ends, up to maxChangeListings listings.
func (r *runner) changes(ctx context.Context, windows []repository.Window, want, has map[string]bool) error {
	for listing := 1; ; listing++ {
		if listing > 1 || r.copiedBackups() {
			from, err := r.job.From.List(ctx)
			if err != nil {
				return fmt.Errorf("list the primary %s again: %w", r.job.From.Store, err)
			}
			if windows, err = r.job.From.Windows(ctx, from); err != nil {
				return fmt.Errorf("list the primary's changes again: %w", err)
			}
			if _, want, err = r.wanted(from, windows); err != nil {
				return err
			}
		}
		err := r.copyChanges(ctx, windows, want, has)
		if err == nil || !errors.Is(err, uploader.ErrNotFound) || listing == maxChangeListings || ctx.Err() != nil {
			return err
		}
		r.lg.Info("copy: a change segment listed in the primary is gone (compacted meanwhile); listing again", "listing", listing, "err", err)
	}
}

// copiedBackups reports whether the run copied (or repaired) a backup.
func (r *runner) copiedBackups() bool {
	if r.job.DryRun {
		return false
	}
	return slices.ContainsFunc(r.res.Copied, func(p Planned) bool { return p.Kind == KindBackup })
}

// copyChanges copies the windows of the generations the copy wants and
// holds the anchor of (has): each window's segments in chain order from
// where the copy's window ends, then the markers that vouch for what it
// now holds. Then it removes from the copy what compaction superseded
// and the primary no longer holds.
func (r *runner) copyChanges(ctx context.Context, windows []repository.Window, want, has map[string]bool) error {
	var todo []repository.Window
	for _, w := range windows {
		if w.Recoverable() && want[w.Generation] && has[w.Generation] {
			todo = append(todo, w)
		}
	}
	if len(todo) == 0 {
		return nil
	}
	copies, err := r.copyWindows(ctx)
	if err != nil {
		return err
	}
	for _, w := range todo {
		for _, d := range w.Damaged {
			r.skipped(d.Object, d.Error)
		}
		err := r.copyWindow(ctx, w, copies[w.Generation])
		if r.damage(ctx, err) {
			continue // the window is copied up to the damaged segment
		}
		if err != nil {
			return fmt.Errorf("changes of generation %s: %w", w.Generation, err)
		}
	}
	if r.job.DryRun {
		return nil
	}
	return r.tidy(ctx, todo)
}

// copyWindows lists the copy's windows by generation.
func (r *runner) copyWindows(ctx context.Context) (map[string]repository.Window, error) {
	l, err := r.job.To.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the copy %s: %w", r.job.To.Store, err)
	}
	ws, err := r.job.To.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("list the copy's changes: %w", err)
	}
	out := map[string]repository.Window{}
	for _, w := range ws {
		out[w.Generation] = w
	}
	return out, nil
}

// copyWindow extends the copy's window of w's generation (cw, the zero
// Window when it has none) along the primary's path, object for object:
// each segment on it that the copy does not hold is copied, in chain
// order, also a compacted one whose revisions the copy holds in the
// smaller segments it replaced (the copy's window then reads the
// compacted one, and the small ones are Superseded there, as on the
// primary), so that the copy's change objects are the primary's and
// bounded by its compaction. Then the markers that vouch for what the
// copy now holds.
func (r *runner) copyWindow(ctx context.Context, w repository.Window, cw repository.Window) error {
	through := w.From
	if cw.Anchor != nil && cw.Through > through {
		through = cw.Through
	}
	held := map[string]bool{}
	for _, s := range slices.Concat(cw.Segments, cw.Superseded) {
		held[s.Object.Key] = true
	}
	onCopy := map[string]bool{}
	for _, o := range cw.Markers {
		onCopy[o.Object.Key] = true
	}
	for _, s := range w.Segments {
		if !held[s.Object.Key] {
			if err := r.copySegment(ctx, s); err != nil {
				return err
			}
		}
		through = max(through, s.Last)
	}
	for _, m := range sortedMarkers(w.Markers) {
		if m.Through > through || onCopy[m.Object.Key] {
			continue
		}
		r.res.Copied = append(r.res.Copied, Planned{Kind: KindMarker, ID: m.Generation, Key: m.Object.Key, Size: m.Object.Size})
		if r.job.DryRun {
			continue
		}
		if err := r.small(ctx, m.Object.Key, r.job.To.Lock.OptionsFor(m.Object.Key, "application/json")); err != nil {
			if errors.Is(err, uploader.ErrNotFound) {
				continue // capture replaced it meanwhile; a newer one follows next run
			}
			return fmt.Errorf("progress marker: %w", err)
		}
	}
	return nil
}

// copySegment copies one segment byte for byte (syncSegment); one a
// killed run left at its key that checks out is adopted.
func (r *runner) copySegment(ctx context.Context, s repository.SegmentInfo) error {
	p := Planned{Kind: KindSegment, ID: s.Generation, Key: s.Object.Key, Size: s.Object.Size}
	if r.job.DryRun {
		r.res.Copied = append(r.res.Copied, p)
		return nil
	}
	same, err := r.syncSegment(ctx, s)
	if same {
		r.res.Adopted++
	}
	if err == nil {
		r.res.Copied = append(r.res.Copied, p)
	}
	return err
}

// syncSegment makes the copy hold the primary's segment at key, byte for
// byte: one the copy already holds there is kept when its bytes, read
// back, are the primary's (same is true), and replaced otherwise.
//
// The primary's bytes are checked first (repository.CheckSegmentBytes;
// an encrypted one only with Job.Identities): a damaged segment is a
// *repository.DamageError and is not copied.
func (r *runner) syncSegment(ctx context.Context, s repository.SegmentInfo) (same bool, err error) {
	key := s.Object.Key
	data, err := readAll(ctx, r.job.From.Store, key, maxChangeObject)
	if err != nil {
		return false, fmt.Errorf("read segment %s from the primary: %w", key, err)
	}
	if err := r.job.From.CheckSegmentBytes(s, data, r.job.Identities); err != nil && !errors.Is(err, repository.ErrNoIdentity) && !errors.Is(err, repository.ErrDecrypt) {
		if repository.IsDamage(err) {
			return false, err
		}
		return false, fmt.Errorf("check segment %s of the primary: %w", key, err)
	}
	sum := sha256.Sum256(data)
	w := want{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
	to := r.job.To.Store
	if _, err := to.Stat(ctx, key); err == nil {
		err := readBack(ctx, to, key, w)
		switch {
		case err == nil:
			return true, nil
		case !errors.Is(err, ErrMismatch):
			return false, err
		}
		r.lg.Warn("copy: replacing a segment that is not the primary's", "key", key)
		if err := to.Delete(ctx, key); err != nil {
			return false, fmt.Errorf("remove %s in the copy: %w", key, err)
		}
		r.res.Replaced++
	} else if !errors.Is(err, uploader.ErrNotFound) {
		return false, fmt.Errorf("stat %s in the copy: %w", key, err)
	}
	return false, r.put(ctx, key, data, r.job.To.Lock.OptionsFor(key, "application/octet-stream"))
}

// tidy removes from the copy, per window copied, what the primary
// removed after its grace, no sooner: the segments a compacted one
// supersedes in the copy (replacedGone) and the markers a newer one
// replaces, once the primary no longer holds them and the copy's store
// no longer locks them (a locked one waits for a later run). Under the
// copy's Object Lock, what stays in a window past its short lock has its
// lock extended (repository.ExtendStayers).
func (r *runner) tidy(ctx context.Context, windows []repository.Window) error {
	copies, err := r.copyWindows(ctx)
	if err != nil {
		return err
	}
	for _, w := range windows {
		primary := map[string]bool{}
		for _, s := range slices.Concat(w.Segments, w.Superseded) {
			primary[s.Object.Key] = true
		}
		for _, m := range w.Markers {
			primary[m.Object.Key] = true
		}
		cw, ok := copies[w.Generation]
		if !ok || cw.Anchor == nil {
			continue
		}
		gone, err := r.replacedGone(ctx, cw, primary)
		if err != nil {
			return err
		}
		ms := sortedMarkers(cw.Markers)
		for i, m := range ms {
			if i < len(ms)-1 && !m.Sealed && !primary[m.Object.Key] {
				gone = append(gone, m.Object.Key) // the last (newest) stays
			}
		}
		if _, err := r.job.To.ExtendStayers(ctx, cw, nil); err != nil {
			return err
		}
		for _, k := range gone {
			if locked, err := repository.LockedNow(ctx, r.job.To.Store, k, r.now); err != nil || locked {
				continue // a later run
			}
			if err := r.job.To.Store.Delete(ctx, k); err != nil {
				return fmt.Errorf("remove the superseded %s from the copy: %w", k, err)
			}
			r.res.Removed++
		}
	}
	return nil
}

// replacedGone returns the keys of the segments superseded in the copy's
// window cw that may go: the primary (whose keys are primary) no longer
// holds them, this process does not hold them for a restore
// (repository.Held), and the compacted segment that replaced them in
// the copy is older than the grace there, as the primary's rule is
// (capture deletes replaced segments once their replacement is past
// capture.compaction_grace): a restore from the copy that listed them
// before the compacted one landed still finds them, however late the
// copy took it. The compacted segment is read back first and checked
// against the primary's bytes; one that does not check out is replaced,
// and what it replaced stays until a later run.
func (r *runner) replacedGone(ctx context.Context, cw repository.Window, primary map[string]bool) ([]string, error) {
	grace := r.job.Grace
	if grace <= 0 {
		grace = repository.CompactPolicy{}.WithDefaults().Grace
	}
	var gone []string
	for _, c := range cw.Segments {
		var under []string
		for _, s := range cw.Superseded {
			if c.Level > 0 && s.First >= c.First && s.Last <= c.Last && !primary[s.Object.Key] && !repository.Held(s.Object.Key) {
				under = append(under, s.Object.Key)
			}
		}
		if len(under) == 0 || r.now.Sub(c.Object.ModTime) < grace || !primary[c.Object.Key] {
			continue
		}
		same, err := r.syncSegment(ctx, c)
		switch {
		case errors.Is(err, uploader.ErrNotFound):
			continue // the primary replaced it meanwhile: the copy follows next run
		case err != nil:
			return nil, fmt.Errorf("check %s in the copy before removing what it replaced: %w", c.Object.Key, err)
		case same:
			gone = append(gone, under...)
		}
	}
	return gone, nil
}

// sortedMarkers returns ms in (through, at) order.
func sortedMarkers(ms []repository.ProgressInfo) []repository.ProgressInfo {
	ms = slices.Clone(ms)
	slices.SortFunc(ms, func(a, b repository.ProgressInfo) int {
		if c := cmp.Compare(a.Through, b.Through); c != 0 {
			return c
		}
		return a.At.Compare(b.At)
	})
	return ms
}
