package repository

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Window is one generation's recoverable window, as the store's names
// say (no object is decrypted): [From, Through] in revisions and
// [FromTime, ThroughTime] in time.
//
// The names alone prove contiguity (every segment starts right after its
// predecessor: revisions are dense) but not the hash chain or the
// writers' tokens; CheckChain over the segments' headers does, and
// restore and verify --changes run it before trusting a window.
type Window struct {
	Generation string
	// Anchor is the generation's committed snapshot (the backup whose id
	// is the generation's), nil when it is not committed or is gone: then
	// the window is not recoverable.
	Anchor *Manifest
	// From is the anchor's revision, FromTime its creation time.
	From     int64
	FromTime time.Time
	// Through is the last revision of the unbroken run of segments after
	// From (From when there is none yet).
	Through int64
	// ThroughTime is the newest time a progress marker vouches for at
	// Through (the cluster had no revision after Through then); FromTime
	// when no marker does. A restore that reads the last segment can
	// refine it with the revisions' receive times.
	ThroughTime time.Time
	// Segments is the unbroken run, in revision order.
	Segments []SegmentInfo
	// Sealed is true when a sealed marker ends the generation at or
	// before Through; SealReason says why.
	Sealed     bool
	SealReason string
	// Problem says why the window ends before the stored segments do, or
	// why it is not recoverable; "" when neither.
	Problem string
	// Stray are segments after a break and unnamed objects under the
	// generation: never part of the window, never deleted silently.
	Stray []uploader.ObjectInfo
	// Markers are the generation's progress markers, in order.
	Markers []ProgressInfo
}

// Recoverable reports whether a point-in-time restore can start from
// the window: its anchor is committed and intact.
func (w *Window) Recoverable() bool { return w.Anchor != nil }

// Contains reports whether revision r is inside the window.
func (w *Window) Contains(r int64) bool { return w.Anchor != nil && r >= w.From && r <= w.Through }

func (w *Window) String() string {
	return fmt.Sprintf("generation %s: revisions %d-%d (%s to %s)", w.Generation, w.From, w.Through,
		w.FromTime.UTC().Format(time.RFC3339), w.ThroughTime.UTC().Format(time.RFC3339))
}

// Windows returns the recoverable window of every generation in the
// store, oldest generation first. l is the snapshot listing (from List),
// which names the anchors; a generation whose anchor is not an intact
// committed backup in l has a window with a nil Anchor and a Problem.
func (b *Repo) Windows(ctx context.Context, l *Listing) ([]Window, error) {
	dir := b.changesDir()
	segs := map[string][]SegmentInfo{}
	stray := map[string][]uploader.ObjectInfo{}
	var loose []uploader.ObjectInfo
	err := b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		gen, name, ok := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		if !ok || validGeneration(gen) != nil {
			loose = append(loose, o)
			return nil
		}
		first, last, c, e, err := ParseSegmentName(name)
		if err != nil || strings.Contains(name, "/") {
			stray[gen] = append(stray[gen], o)
			return nil
		}
		segs[gen] = append(segs[gen], SegmentInfo{Generation: gen, First: first, Last: last, Compression: c, Encryption: e, Object: o})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list change segments in %s: %w", b.Store, err)
	}
	markers, _, err := b.ListProgress(ctx)
	if err != nil {
		return nil, err
	}
	anchors := map[string]*Manifest{}
	if l != nil {
		for _, e := range l.Backups {
			if e.State == StateOK {
				anchors[e.Manifest.ID] = e.Manifest
			}
		}
	}
	gens := map[string]bool{}
	for g := range segs {
		gens[g] = true
	}
	for g := range markers {
		gens[g] = true
	}
	for g := range stray {
		gens[g] = true
	}
	var out []Window
	for g := range gens {
		w, err := b.window(ctx, g, anchors[g], segs[g], markers[g])
		if err != nil {
			return nil, err
		}
		w.Stray = append(w.Stray, stray[g]...)
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].FromTime.Equal(out[j].FromTime) {
			return out[i].FromTime.Before(out[j].FromTime)
		}
		return out[i].Generation < out[j].Generation
	})
	_ = loose // objects directly under changes/ belong to no generation; prune reports them
	return out, nil
}

func (b *Repo) window(ctx context.Context, gen string, anchor *Manifest, segs []SegmentInfo, markers []ProgressInfo) (Window, error) {
	w := Window{Generation: gen, Anchor: anchor, Markers: markers}
	if anchor == nil {
		w.Problem = "its snapshot " + gen + " is not an intact committed backup"
		if rev, ok := idRevision(gen); ok {
			w.From, w.Through = rev, rev
		}
		if t, ok := IDTime(gen); ok {
			w.FromTime, w.ThroughTime = t, t
		}
		for _, s := range segs {
			w.Stray = append(w.Stray, s.Object)
		}
		return w, nil
	}
	w.From, w.FromTime = anchor.Revision, anchor.RevisionTime()
	w.Through, w.ThroughTime = anchor.Revision, anchor.RevisionTime()
	next := anchor.Revision + 1
	for i, s := range segs {
		if w.Problem != "" {
			w.Stray = append(w.Stray, s.Object)
			continue
		}
		switch {
		case s.First == next:
			// A second segment at the same First (two writers) is a
			// fork: the window ends before either.
			if i+1 < len(segs) && segs[i+1].First == s.First {
				w.Problem = fmt.Sprintf("two segments start at revision %d (%s, %s): a second writer forked the chain", s.First, s.Object.Key, segs[i+1].Object.Key)
				w.Stray = append(w.Stray, s.Object)
				continue
			}
			w.Segments = append(w.Segments, s)
			w.Through = s.Last
			next = s.Last + 1
		case s.First < next:
			w.Problem = fmt.Sprintf("segment %s overlaps revisions %d-%d", s.Object.Key, s.First, min(s.Last, next-1))
			w.Stray = append(w.Stray, s.Object)
		default:
			w.Problem = fmt.Sprintf("revisions %d-%d are missing before %s", next, s.First-1, s.Object.Key)
			w.Stray = append(w.Stray, s.Object)
		}
	}
	for _, m := range markers {
		if m.Through > w.Through {
			if w.Problem == "" {
				w.Problem = fmt.Sprintf("progress marker %s vouches for revisions through %d, but the stored segments stop at %d", m.Object.Key, m.Through, w.Through)
			}
			continue
		}
		if m.Through == w.Through && m.At.After(w.ThroughTime) {
			w.ThroughTime = m.At
		}
		if m.Sealed && !w.Sealed {
			w.Sealed = true
			p, err := b.ReadProgress(ctx, m)
			if err != nil {
				w.SealReason = "unknown (" + err.Error() + ")"
			} else {
				w.SealReason = p.SealReason
			}
		}
	}
	return w, nil
}

// idRevision returns the revision a backup id names (…-r<rev>).
func idRevision(id string) (int64, bool) {
	i := strings.LastIndex(id, "-r")
	if i < 0 {
		return 0, false
	}
	var r int64
	if _, err := fmt.Sscanf(id[i+2:], "%d", &r); err != nil || r < 1 {
		return 0, false
	}
	return r, true
}
