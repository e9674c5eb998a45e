package repository

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
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
	// Segments is the unbroken run, in revision order: at each revision
	// the object that reaches furthest (a compacted one over the
	// segments it replaced).
	Segments []SegmentInfo
	// Superseded are segments inside the run that a compacted segment on
	// it replaced: left for compaction to delete, never part of a replay.
	Superseded []SegmentInfo
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
	// Untrusted are progress markers not signed by a trusted key (with
	// signing configured): they vouch for nothing.
	Untrusted []uploader.ObjectInfo
	// Damaged are the generation's segments with a current damage record
	// (damage.go): never on the path. The run ends before the first one
	// it cannot go around (through the segments a damaged compacted one
	// replaced, while they are stored), and Problem names it.
	Damaged []Damage

	damagedSegs []SegmentInfo // w.Damaged's segments, while the window is made
	// endsAtDamage: the run ends at a damaged segment, so its last
	// segment is no writer's head (PlanCompaction closes its buckets).
	endsAtDamage bool
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
//
// Progress markers are listed before the segments: a writer stores a
// segment before the marker that vouches for it, so a marker listed
// first never vouches for a segment the later listing misses. (Listed
// the other way round, a segment and its marker stored between the two
// listings made a live generation look broken.) A marker listed here may
// be gone by the time it is read: capture deletes superseded ones.
func (b *Repo) Windows(ctx context.Context, l *Listing) ([]Window, error) {
	markers, _, err := b.ListProgress(ctx)
	if err != nil {
		return nil, err
	}
	dir := b.changesDir()
	segs := map[string][]SegmentInfo{}
	stray := map[string][]uploader.ObjectInfo{}
	err = b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		gen, name, ok := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		if !ok || validGeneration(gen) != nil {
			return nil // directly under changes/: no generation's; prune reports them
		}
		si, err := parseSegmentName(name)
		if err != nil || strings.Contains(name, "/") {
			stray[gen] = append(stray[gen], o)
			return nil
		}
		si.Generation, si.Object = gen, o
		segs[gen] = append(segs[gen], si)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list change segments in %s: %w", b.Store, err)
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
	rd := &markerReads{b: b, read: map[string]*Progress{}}
	for g := range gens {
		w, err := b.window(ctx, g, anchors[g], segs[g], markers[g], l.trustedDamage, rd)
		if err != nil {
			return nil, err
		}
		w.Stray = append(w.Stray, stray[g]...)
		out = append(out, w)
	}
	rd.keep(markers)
	sort.Slice(out, func(i, j int) bool {
		if !out[i].FromTime.Equal(out[j].FromTime) {
			return out[i].FromTime.Before(out[j].FromTime)
		}
		return out[i].Generation < out[j].Generation
	})
	return out, nil
}

func (b *Repo) window(ctx context.Context, gen string, anchor *Manifest, segs []SegmentInfo, markers []ProgressInfo, damage func(string) *Damage, rd *markerReads) (Window, error) {
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
	segs = w.dropDamaged(segs, damage)
	w.path(segs)
	w.damageProblem(segs)
	w.supersededDamage()
	for _, m := range markers {
		if m.Through > w.Through {
			if w.Problem == "" {
				w.Problem = fmt.Sprintf("progress marker %s vouches for revisions through %d, but the stored segments stop at %d", m.Object.Key, m.Through, w.Through)
			}
			continue
		}
		if m.Through == w.Through && m.At.After(w.ThroughTime) {
			if b.Signing() {
				// A marker vouches for time only when it is this
				// cluster's own: read it and check its signature.
				if _, err := rd.get(ctx, m); errors.Is(err, ErrUntrusted) {
					w.Untrusted = append(w.Untrusted, m.Object)
					continue
				} else if err != nil {
					return w, err
				}
			}
			w.ThroughTime = m.At
		}
		if m.Sealed && !w.Sealed {
			w.Sealed = true
			p, err := rd.get(ctx, m)
			if err != nil {
				w.SealReason = "unknown (" + err.Error() + ")"
			} else {
				w.SealReason = p.SealReason
			}
		}
	}
	return w, nil
}

// markerReads reads the progress markers one Windows call needs, each
// at most once, and the ones read before from the Repo's cache (a marker
// is immutable: its name says what it vouches for).
type markerReads struct {
	b    *Repo
	read map[string]*Progress // by key: the markers read and checked in this call
}

// get returns marker m, checked (its signature, with signing on).
func (r *markerReads) get(ctx context.Context, m ProgressInfo) (*Progress, error) {
	if p := r.read[m.Object.Key]; p != nil {
		return p, nil
	}
	p := r.b.cache.marker(m.Object)
	if p == nil {
		var err error
		if p, err = r.b.ReadProgress(ctx, m); err != nil {
			return nil, err
		}
	}
	r.read[m.Object.Key] = p
	return p, nil
}

// keep makes the markers this call read (of those listed) the cached
// ones; one that could not be read stays unknown and is read again.
func (r *markerReads) keep(listed map[string][]ProgressInfo) {
	var objs []uploader.ObjectInfo
	var ps []*Progress
	var errs []error
	for _, ms := range listed {
		for _, m := range ms {
			if p := r.read[m.Object.Key]; p != nil {
				objs, ps, errs = append(objs, m.Object), append(ps, p), append(errs, nil)
			}
		}
	}
	r.b.cache.keepMarkers(objs, ps, errs)
}

// path sets the window's run: from the anchor's revision + 1, at each
// step the object that starts there and reaches furthest. Compaction
// leaves a compacted segment and the segments it replaces side by side
// until they are deleted: those inside the run are Superseded, not
// stray. Two segments of level 0 starting at one revision are two
// writers' (a fork): the run ends before them. An object that starts
// inside the run and ends past it overlaps it: the run ends there too.
func (w *Window) path(segs []SegmentInfo) {
	segs = slices.Clone(segs)
	slices.SortFunc(segs, func(a, b SegmentInfo) int {
		if c := cmp.Compare(a.First, b.First); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Last, a.Last); c != 0 {
			return c
		}
		return cmp.Compare(b.Level, a.Level)
	})
	next := w.From + 1
	for i := 0; i < len(segs); i++ {
		s := segs[i]
		switch {
		case w.Problem != "":
			w.Stray = append(w.Stray, s.Object)
		case s.First > w.From && s.Last < next:
			w.Superseded = append(w.Superseded, s)
		case s.First < next:
			w.Problem = fmt.Sprintf("segment %s overlaps revisions %d-%d", s.Object.Key, s.First, min(s.Last, next-1))
			w.Stray = append(w.Stray, s.Object)
		case s.First > next:
			w.Problem = fmt.Sprintf("revisions %d-%d are missing before %s", next, s.First-1, s.Object.Key)
			w.Stray = append(w.Stray, s.Object)
		default:
			if j := forkAt(segs[i:]); j > 0 {
				w.Problem = fmt.Sprintf("two segments start at revision %d (%s, %s): a second writer forked the chain", s.First, segs[i+j-1].Object.Key, segs[i+j].Object.Key)
				w.Stray = append(w.Stray, s.Object)
				continue
			}
			w.Segments = append(w.Segments, s)
			w.Through = s.Last
			next = s.Last + 1
		}
	}
}

// forkAt returns the index of a second level-0 segment starting where
// segs[0] does (0 when there is none).
func forkAt(segs []SegmentInfo) int {
	seen := -1
	for j, s := range segs {
		if s.First != segs[0].First {
			break
		}
		if s.Level == 0 {
			if seen >= 0 {
				return j
			}
			seen = j
		}
	}
	return 0
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

// trustedDamage is DamageOf for the records signed by a trusted key (or
// with no trust configured): an untrusted record is shown but changes no
// window.
func (l *Listing) trustedDamage(key string) *Damage {
	if d := l.DamageOf(key); d != nil && d.Untrusted == "" {
		return d
	}
	return nil
}

// dropDamaged returns segs without the damaged ones, which it keeps in
// w.Damaged and w.damagedSegs.
func (w *Window) dropDamaged(segs []SegmentInfo, damage func(string) *Damage) []SegmentInfo {
	var sound []SegmentInfo
	for _, s := range segs {
		if d := damage(s.Object.Key); d != nil {
			w.Damaged = append(w.Damaged, *d)
			w.damagedSegs = append(w.damagedSegs, s)
			continue
		}
		sound = append(sound, s)
	}
	return sound
}

// supersededDamage files the damaged segments: one that a compacted
// segment on the path covers is Superseded (compaction deletes it, as it
// would a sound one; no problem), any other is Stray.
func (w *Window) supersededDamage() {
	var left []Damage
	for i, s := range w.damagedSegs {
		if w.covered(s) {
			w.Superseded = append(w.Superseded, s)
			continue
		}
		w.Stray = append(w.Stray, s.Object)
		left = append(left, w.Damaged[i])
	}
	w.Damaged, w.damagedSegs = left, nil
}

// damageProblem says what the damaged segments do to the window: the
// first one the run could not go around ends it (the revisions it holds
// are lost from this snapshot on, those after the hole are stored but
// cannot be replayed from it); one it went around is a problem all the
// same (the damaged object is still there). sound are the segments the
// path was made of.
func (w *Window) damageProblem(sound []SegmentInfo) {
	for i, s := range w.damagedSegs {
		if s.First > w.Through+1 || s.Last <= w.Through {
			continue
		}
		d := w.Damaged[i]
		p := fmt.Sprintf("segment %s (revisions %d-%d) is damaged: %s (found by %s at %s); recoverable through revision %d",
			d.Object, s.First, s.Last, d.Error, d.FoundBy, d.FoundAt.UTC().Format(time.RFC3339), w.Through)
		after := int64(0)
		for _, o := range sound {
			after = max(after, o.Last)
		}
		if after > s.Last {
			p += fmt.Sprintf("; revisions %d-%d after the hole are stored but cannot be replayed from this snapshot", s.Last+1, after)
		}
		w.Problem, w.endsAtDamage = p, true
		return
	}
	if w.Problem != "" {
		return
	}
	for i, s := range w.damagedSegs {
		if w.covered(s) {
			continue // superseded by a sound compacted segment: harmless
		}
		d := w.Damaged[i]
		w.Problem = fmt.Sprintf("segment %s is damaged: %s (found by %s at %s); the window goes around it through the segments it replaced",
			d.Object, d.Error, d.FoundBy, d.FoundAt.UTC().Format(time.RFC3339))
		return
	}
}

// covered reports whether a compacted segment on the path holds every
// revision of s.
func (w *Window) covered(s SegmentInfo) bool {
	return slices.ContainsFunc(w.Segments, func(c SegmentInfo) bool { return c.Level > 0 && c.First <= s.First && c.Last >= s.Last })
}
