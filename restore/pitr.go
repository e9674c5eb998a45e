package restore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// Target is a point in time: the state after revision Revision, or after
// the last revision received at or before Time. Exactly one is set.
type Target struct {
	Revision int64
	Time     time.Time
}

func (t Target) String() string {
	if t.Revision != 0 {
		return fmt.Sprintf("revision %d", t.Revision)
	}
	return "time " + t.Time.UTC().Format(time.RFC3339Nano)
}

// PointInTimePlan is a resolved point-in-time restore: a committed
// snapshot and the checked change segments that take it to Revision.
type PointInTimePlan struct {
	Target Target
	// Revision is the revision restored (the target, or the one the
	// target time resolves to).
	Revision int64
	// Window is the generation's window that holds Revision.
	Window repository.Window
	// Snapshot is the backup replay starts from: the newest intact
	// committed backup of the generation at or before Revision (the
	// anchor, or a later snapshot of the same cluster taken during it).
	Snapshot *repository.Manifest
	// Segments are the segments holding revisions Snapshot.Revision+1
	// through Revision, in order (none when Revision is the snapshot's).
	Segments []repository.SegmentInfo
	// Links are the headers and stored hashes of the Segments that
	// planning read (same order as Segments; a zero ChainLink for one it
	// did not read): Replay refuses a segment whose bytes changed since.
	// A revision target reads none; a time target reads the generation's
	// segments up to the one that resolves it.
	Links []repository.ChainLink
	// Revisions is how many revisions the replay applies.
	Revisions int64
	// Checked is how many segments planning read (to resolve a time
	// target); 0 for a revision target. Replay checks the chain of the
	// segments it applies as it reads them.
	Checked int
}

// Keys are the store keys a restore of the plan reads: the snapshot's
// manifest and data object and the segments. Hold them
// (repository.Hold) from planning to the end of the restore, so that a
// prune of this process leaves them.
func (p *PointInTimePlan) Keys(repo *repository.Repo) []string {
	keys := []string{repo.ManifestKey(p.Snapshot.ID), p.Snapshot.Object}
	for _, s := range p.Segments {
		keys = append(keys, s.Object.Key)
	}
	return keys
}

// OutsideWindowsError is a target no recoverable window holds.
type OutsideWindowsError struct {
	Target Target
	// Why says where the target falls: before the first snapshot, after
	// the captured-through point, in a gap, in a generation whose
	// snapshot is not committed.
	Why string
	// Windows are every generation's window, recoverable or not.
	Windows []repository.Window
}

func (e *OutsideWindowsError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s is outside every recoverable window (%s): ", e.Target, e.Why)
	var rec, not []string
	for _, w := range e.Windows {
		if w.Recoverable() {
			rec = append(rec, describeWindow(w))
		} else {
			not = append(not, fmt.Sprintf("generation %s (%s)", w.Generation, w.Problem))
		}
	}
	if len(rec) == 0 {
		b.WriteString("there is no recoverable window")
	} else {
		b.WriteString("the recoverable windows are " + strings.Join(rec, "; "))
	}
	if len(not) > 0 {
		b.WriteString("; not recoverable: " + strings.Join(not, "; "))
	}
	b.WriteString(" (lifeboat list shows them)")
	return b.String()
}

func describeWindow(w repository.Window) string {
	return fmt.Sprintf("revisions %d-%d (%s to %s) in generation %s", w.From, w.Through,
		w.FromTime.UTC().Format(time.RFC3339), w.ThroughTime.UTC().Format(time.RFC3339), w.Generation)
}

// ErrTarget is wrapped by a target that is not one: neither or both of
// revision and time, a revision below 1.
var ErrTarget = errors.New("invalid point-in-time target")

// PlanPointInTime resolves t against the store: the window that holds
// it (the newest generation's, when a restored cluster made two hold the
// same revision), the snapshot to start from and the segments to replay.
//
// A revision target is planned from the store's names alone: no segment
// is read. The chain a replay depends on is only the part from the
// segment holding the snapshot's revision + 1 through the target (what
// came before the start snapshot is in the snapshot), and Replay checks
// exactly that part while it reads each applied segment once, failing
// before anything is restored. A time target is resolved from the
// progress markers' names, which bound it to the revisions between two
// markers, and the receive times of those revisions: only the segments
// between the markers are read (a generation of a week holds some
// 120 000 segments at the default interval; the whole chain is not read
// to find one time). A target outside every recoverable window is an
// *OutsideWindowsError.
func PlanPointInTime(ctx context.Context, repo *repository.Repo, l *repository.Listing, t Target, ids []age.Identity) (*PointInTimePlan, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if l == nil {
		var err error
		if l, err = repo.List(ctx); err != nil {
			return nil, err
		}
	}
	windows, err := repo.Windows(ctx, l)
	if err != nil {
		return nil, err
	}
	lineage, err := repo.ChosenLineage(l)
	if err != nil {
		return nil, err
	}
	windows = repository.OfLineage(windows, lineage)
	w, err := pickWindow(windows, t)
	if err != nil {
		return nil, err
	}
	p := &PointInTimePlan{Target: t, Window: *w, Revision: t.Revision}
	// A revision target reads nothing here; a time target reads the
	// segments its markers bound it to (resolveTime). The chain of what
	// is replayed is checked by Replay, as it reads each applied segment.
	vouched, links := w.ThroughTime, map[string]repository.ChainLink{}
	if !t.Time.IsZero() {
		if vouched, err = resolveTime(ctx, repo, p, windows, w, ids, links); err != nil {
			return nil, err
		}
	}
	p.Snapshot = startSnapshot(l, w, p.Revision, vouched)
	if err := p.addSegments(links); err != nil {
		return nil, err
	}
	return p, nil
}

// check refuses a target that is not one revision or one time.
func (t Target) check() error {
	switch {
	case t.Revision != 0 && !t.Time.IsZero():
		return fmt.Errorf("%w: give a revision or a time, not both", ErrTarget)
	case t.Revision == 0 && t.Time.IsZero():
		return fmt.Errorf("%w: give a revision or a time", ErrTarget)
	case t.Revision < 0:
		return fmt.Errorf("%w: revision %d: revisions start at 1", ErrTarget, t.Revision)
	}
	return nil
}

// resolveTime resolves the plan's time target in window w (one of
// windows) to p.Revision: the progress markers (names only) bound the
// revision it resolves to: a marker at or before the time vouches that
// every revision through its Through was received by then, one after the
// time that none after its Through was. Only the segments between the
// two are read, for the revisions' receive times (counted in p.Checked,
// their chain links kept in links). It returns the time through which
// the window is vouched for, or an *OutsideWindowsError when the time is
// past it or before the window.
func resolveTime(ctx context.Context, repo *repository.Repo, p *PointInTimePlan, windows []repository.Window, w *repository.Window, ids []age.Identity, links map[string]repository.ChainLink) (time.Time, error) {
	t := p.Target
	vouched := w.ThroughTime
	if t.Time.Before(w.FromTime) {
		return vouched, &OutsideWindowsError{Target: t, Why: "before the window's snapshot", Windows: windows}
	}
	lo, hi, bounded := w.From, w.Through, false
	for _, mk := range w.Markers {
		switch {
		case mk.Through < w.From || mk.Through > w.Through:
			// not about the window's unbroken run
		case !mk.At.After(t.Time):
			lo = max(lo, mk.Through)
		case mk.Through <= hi:
			hi, bounded = mk.Through, true
		}
	}
	lo = min(lo, hi)
	p.Revision = lo
	resolved := lo == hi && bounded
	for _, si := range w.Segments {
		if resolved || si.First > hi {
			break
		}
		if si.Last <= lo {
			continue
		}
		seg, hash, err := repo.ReadSegment(ctx, si, ids)
		if err != nil {
			return vouched, fmt.Errorf("read the changes of generation %s: %w", w.Generation, err)
		}
		p.Checked++
		links[si.Object.Key] = repository.ChainLink{Key: si.Object.Key, Header: seg.SegmentHeader, Hash: hash}
		for _, r := range seg.Revisions {
			if r.Revision <= lo {
				continue
			}
			if r.Received.After(t.Time) || r.Revision > hi {
				resolved = true
				break
			}
			p.Revision = r.Revision
		}
		if n := len(seg.Revisions); n > 0 && seg.Revisions[n-1].Received.After(vouched) {
			vouched = seg.Revisions[n-1].Received
		}
	}
	resolved = resolved || (bounded && p.Revision == hi)
	if !resolved && t.Time.After(vouched) {
		where := "after the captured-through point"
		if newer := newerRecoverable(windows, w); newer {
			where = "in a gap between generations"
		}
		return vouched, &OutsideWindowsError{Target: t, Why: fmt.Sprintf("%s: generation %s holds revisions up to %d, vouched for until %s",
			where, w.Generation, w.Through, vouched.UTC().Format(time.RFC3339Nano)), Windows: windows}
	}
	return vouched, nil
}

// startSnapshot is the snapshot a plan to revision rev in window w
// starts from: the newest snapshot of this history at or before the
// target, taken from the same cluster while the generation was watching
// it (so it is a state of this chain, not of a cluster restored later
// with the same ID), before vouched and any sealing marker.
func startSnapshot(l *repository.Listing, w *repository.Window, rev int64, vouched time.Time) *repository.Manifest {
	end := vouched
	for _, m := range w.Markers {
		if m.Sealed && m.At.Before(end) {
			end = m.At
		}
	}
	snap := w.Anchor
	for _, e := range l.Backups {
		m := e.Manifest
		if e.State != repository.StateOK || m.EtcdClusterID != w.Anchor.EtcdClusterID {
			continue
		}
		if m.Revision < w.From || m.Revision > rev || m.CreatedAt.Before(w.Anchor.CreatedAt) || m.CreatedAt.After(end) {
			continue
		}
		if m.Revision > snap.Revision {
			snap = m
		}
	}
	return snap
}

// StartFrom makes p replay from snap, a committed backup of p's window
// at or below its revision (the anchor, or a snapshot of the same cluster
// taken during the window), instead of the newest one: the fleet hub's
// point-in-time drill replays from one backup to a later backup's
// revision and compares with that backup's HashKV.
func (p *PointInTimePlan) StartFrom(snap *repository.Manifest) error {
	w := &p.Window
	if snap == nil || w.Anchor == nil {
		return errors.New("plan: no snapshot to start from")
	}
	anchor := snap.ID == w.Anchor.ID
	if !anchor && (snap.EtcdClusterID != w.Anchor.EtcdClusterID || snap.Revision < w.From || snap.CreatedAt.Before(w.Anchor.CreatedAt)) {
		return fmt.Errorf("plan: backup %s (revision %d) is not a snapshot of generation %s (revisions %d-%d)", snap.ID, snap.Revision, w.Generation, w.From, w.Through)
	}
	if snap.Revision > p.Revision {
		return fmt.Errorf("plan: backup %s is at revision %d, after the target %d", snap.ID, snap.Revision, p.Revision)
	}
	p.Snapshot, p.Segments, p.Links = snap, nil, nil
	return p.addSegments(map[string]repository.ChainLink{})
}

// addSegments adds to the plan the window's segments after its snapshot
// through its revision, with the chain links resolveTime read (links),
// and refuses a window whose segments stop before the revision.
func (p *PointInTimePlan) addSegments(links map[string]repository.ChainLink) error {
	w := &p.Window
	for _, si := range w.Segments {
		if si.First > p.Revision {
			break
		}
		if si.Last > p.Snapshot.Revision {
			p.Segments = append(p.Segments, si)
			p.Links = append(p.Links, links[si.Object.Key])
		}
	}
	p.Revisions = p.Revision - p.Snapshot.Revision
	if p.Revisions > 0 && (len(p.Segments) == 0 || p.Segments[len(p.Segments)-1].Last < p.Revision) {
		// Windows ends the window at the last stored segment: this is a
		// store that changed while we read it.
		return fmt.Errorf("plan the restore to %s: the segments of generation %s stop before revision %d: list again", p.Target, w.Generation, p.Revision)
	}
	return nil
}

// pickWindow returns the newest recoverable window that can hold t, or
// an *OutsideWindowsError saying where t falls.
func pickWindow(windows []repository.Window, t Target) (*repository.Window, error) {
	for i := len(windows) - 1; i >= 0; i-- {
		w := &windows[i]
		if !w.Recoverable() {
			continue
		}
		if t.Revision != 0 && w.Contains(t.Revision) {
			return w, nil
		}
		// A time is checked against the window's end once its segments
		// are read (their receive times can vouch for more than the
		// markers do).
		if !t.Time.IsZero() && !t.Time.Before(w.FromTime) {
			return w, nil
		}
	}
	return nil, &OutsideWindowsError{Target: t, Why: whereOutside(windows, t), Windows: windows}
}

// newerRecoverable reports whether a recoverable window starts after w.
func newerRecoverable(windows []repository.Window, w *repository.Window) bool {
	for _, o := range windows {
		if o.Recoverable() && o.Generation != w.Generation && o.FromTime.After(w.FromTime) {
			return true
		}
	}
	return false
}

// whereOutside says where a target no recoverable window holds falls.
func whereOutside(windows []repository.Window, t Target) string {
	var rec []repository.Window
	for _, w := range windows {
		if w.Recoverable() {
			rec = append(rec, w)
		}
	}
	for _, w := range windows {
		if w.Recoverable() {
			continue
		}
		// Its segments are strays (no anchor): its markers say how far
		// it went.
		through, throughTime := w.Through, w.ThroughTime
		for _, m := range w.Markers {
			through = max(through, m.Through)
			if m.At.After(throughTime) {
				throughTime = m.At
			}
		}
		if (t.Revision != 0 && t.Revision >= w.From && t.Revision <= through) || (!t.Time.IsZero() && !t.Time.Before(w.FromTime) && !t.Time.After(throughTime)) {
			return "in generation " + w.Generation + ", which is not recoverable: " + w.Problem
		}
	}
	if len(windows) == 0 {
		return "the store holds no captured changes: point-in-time restore needs capture (capture.enabled, the agent's capture job)"
	}
	if len(rec) == 0 {
		return "no generation is recoverable"
	}
	before := func(w repository.Window) bool {
		if t.Revision != 0 {
			return t.Revision < w.From
		}
		return t.Time.Before(w.FromTime)
	}
	switch {
	case before(rec[0]):
		return "before the first snapshot"
	case !before(rec[len(rec)-1]):
		return "after the captured-through point"
	}
	return "in a gap between generations"
}

// checkAnchorLink checks that the first segment continues the anchor:
// its cluster ID, snapshot id and revision.
func checkAnchorLink(anchor *repository.Manifest, first repository.ChainLink) error {
	h := first.Header
	if h.SnapshotID != anchor.ID || h.SnapshotRevision != anchor.Revision {
		return fmt.Errorf("check the changes of generation %s: %s follows snapshot %s at revision %d, the generation's snapshot is %s at revision %d",
			h.Generation, first.Key, h.SnapshotID, h.SnapshotRevision, anchor.ID, anchor.Revision)
	}
	if id, err := strconv.ParseUint(anchor.EtcdClusterID, 16, 64); err == nil && id != h.ClusterID {
		return fmt.Errorf("check the changes of generation %s: %s was captured from cluster %x, snapshot %s from cluster %s",
			h.Generation, first.Key, h.ClusterID, anchor.ID, anchor.EtcdClusterID)
	}
	return nil
}

// checkStart checks that first, the first segment a replay applies,
// belongs where the plan puts it: the generation's first segment names
// the anchor (checkAnchorLink); a later one names no snapshot and was
// captured from the anchor's cluster in the same generation. Its link to
// its predecessor is not checked: the replay starts from a snapshot at or
// after that predecessor's revisions, so what came before does not
// matter (a fork there leaves two segments at one revision, which
// Windows ends the window before).
func checkStart(w *repository.Window, first repository.ChainLink) error {
	h := first.Header
	if len(w.Segments) > 0 && first.Key == w.Segments[0].Object.Key {
		return checkAnchorLink(w.Anchor, first)
	}
	fail := func(p repository.ChainProblem, detail string) error {
		return fmt.Errorf("check the changes of generation %s: %w", w.Generation,
			&repository.ChainError{Problem: p, Key: first.Key, From: h.First, To: h.Last, Detail: detail})
	}
	switch {
	case h.Generation != w.Generation:
		return fail(repository.ChainMismatch, "it names generation "+h.Generation)
	case h.SnapshotID != "":
		return fail(repository.ChainMismatch, "a segment after the generation's first names a snapshot ("+h.SnapshotID+")")
	case h.PrevHash == "":
		return fail(repository.ChainNoStart, "a segment after the generation's first names no predecessor")
	}
	if id, err := strconv.ParseUint(w.Anchor.EtcdClusterID, 16, 64); err == nil && id != h.ClusterID {
		return fail(repository.ChainMismatch, fmt.Sprintf("captured from cluster %x, snapshot %s from cluster %s", h.ClusterID, w.Anchor.ID, w.Anchor.EtcdClusterID))
	}
	return nil
}
