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
		if err := r.copyWindow(ctx, w, copies[w.Generation]); err != nil {
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
// Window when it has none) along the primary's path.
func (r *runner) copyWindow(ctx context.Context, w repository.Window, cw repository.Window) error {
	through := w.From
	if cw.Anchor != nil && cw.Through > through {
		through = cw.Through
	}
	onCopy := map[string]bool{}
	for _, o := range cw.Markers {
		onCopy[o.Object.Key] = true
	}
	for _, s := range w.Segments {
		if s.Last <= through {
			continue // the copy holds these revisions (maybe in other objects)
		}
		if err := r.copySegment(ctx, s); err != nil {
			return err
		}
		through = s.Last
	}
	for _, m := range sortedMarkers(w.Markers) {
		if m.Through > through || onCopy[m.Object.Key] {
			continue
		}
		r.res.Copied = append(r.res.Copied, Planned{Kind: KindMarker, ID: m.Generation, Key: m.Object.Key, Size: m.Object.Size})
		if r.job.DryRun {
			continue
		}
		if err := r.small(ctx, m.Object.Key, uploader.PutOptions{ContentType: "application/json"}); err != nil {
			if errors.Is(err, uploader.ErrNotFound) {
				continue // capture replaced it meanwhile; a newer one follows next run
			}
			return fmt.Errorf("progress marker: %w", err)
		}
	}
	return nil
}

// copySegment copies one segment byte for byte. One the copy already
// holds at its key (a killed run's, off the copy's window) is kept when
// its bytes are the primary's and replaced otherwise.
func (r *runner) copySegment(ctx context.Context, s repository.SegmentInfo) error {
	key := s.Object.Key
	r.res.Copied = append(r.res.Copied, Planned{Kind: KindSegment, ID: s.Generation, Key: key, Size: s.Object.Size})
	if r.job.DryRun {
		return nil
	}
	data, err := readAll(ctx, r.job.From.Store, key, maxChangeObject)
	if err != nil {
		return fmt.Errorf("read segment %s from the primary: %w", key, err)
	}
	sum := sha256.Sum256(data)
	w := want{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
	to := r.job.To.Store
	if _, err := to.Stat(ctx, key); err == nil {
		err := readBack(ctx, to, key, w)
		switch {
		case err == nil:
			r.res.Adopted++
			return nil
		case !errors.Is(err, ErrMismatch):
			return err
		}
		r.lg.Warn("copy: replacing a segment that is not the primary's", "key", key)
		if err := to.Delete(ctx, key); err != nil {
			return fmt.Errorf("remove %s in the copy: %w", key, err)
		}
		r.res.Replaced++
	} else if !errors.Is(err, uploader.ErrNotFound) {
		return fmt.Errorf("stat %s in the copy: %w", key, err)
	}
	return r.put(ctx, key, data, uploader.PutOptions{ContentType: "application/octet-stream"})
}

// tidy removes from the copy, per window copied, the segments that a
// compacted one supersedes there and the markers a newer one replaces,
// when the primary no longer holds them (it removed them after its grace:
// the copy follows, no sooner).
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
		var gone []string
		for _, s := range cw.Superseded {
			if !primary[s.Object.Key] {
				gone = append(gone, s.Object.Key)
			}
		}
		ms := sortedMarkers(cw.Markers)
		for i, m := range ms {
			if i < len(ms)-1 && !m.Sealed && !primary[m.Object.Key] {
				gone = append(gone, m.Object.Key) // the last (newest) stays
			}
		}
		for _, k := range gone {
			if err := r.job.To.Store.Delete(ctx, k); err != nil {
				return fmt.Errorf("remove the superseded %s from the copy: %w", k, err)
			}
			r.res.Removed++
		}
	}
	return nil
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
