package repository

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Compaction merges a generation's small segments, as they age, into
// larger ones, so that the objects of a window and the work of every
// listing grow with the time a window covers, not with the capture
// interval: at 1 s, an hour is 3 600 segments as written and, with
// levels of 30 s, 5 min and 1 h, at most about 50 objects once
// compacted (one per closed hour, one per closed 5 minutes of the
// current hour, one per closed 30 s of the current 5 minutes, and the
// segments of the current 30 s).
//
// A compacted segment of level n replaces a run of consecutive segments
// of the window's path, each of a lower level, whose times fall in one
// bucket of level n's span (a segment's time: its store time at level 0,
// its bucket at level n). It holds their revisions and leases as one
// segment (CompactedFormat) and keeps the chain: its PrevHash is its
// first source's, its EndHash the chain hash of its last, so the
// segments around it link as before (ChainLink.ChainHash).
//
// Trusted by construction: with trusted keys configured, every source
// is read with its signature checked (an untrusted one stops the step:
// nothing untrusted is ever merged into a segment the compactor signs),
// the compacted segment is signed with the compactor's key (Repo.Signer,
// the agent's) for its own key, and a compacted segment found at its
// name is adopted only when it is trusted too.
//
// Crash-safe by order: the compacted segment is stored (never
// overwriting), read back and checked against its sources; the sources
// stay until it is older than the grace period and has been read back
// once more, so that a restore that listed them before still finds
// them. Killed at any point, a window is the same set of revisions:
// Windows reads the path that reaches furthest and leaves the replaced
// segments Superseded. Idempotent: a compacted segment already stored
// (by a run that was killed) is adopted when it checks out.

// CompactPolicy says how segments are compacted.
type CompactPolicy struct {
	// Levels are the spans of levels 1, 2, …, each a multiple of the one
	// before (e.g. 30s, 5m, 1h). None: no compaction.
	Levels []time.Duration
	// Settle is how long after a bucket's end its segments are left
	// alone (the writer may still be storing one). Default 2×Levels[0]/30,
	// at least 1s.
	Settle time.Duration
	// MaxBytes bounds the raw bytes of one compacted segment. Its
	// sources are read one at a time and their records kept compressed
	// while it is made, so a step's heap grows with its compressed size,
	// not its raw size (BenchmarkCompactMemory: 30 MiB at 16 MiB of
	// values that compress to about 60 %, 74 MiB at 64 MiB). Default
	// 64 MiB; capture ties it to its own memory budget
	// (capture.Job.Compact).
	MaxBytes int64
	// Grace is how long replaced segments stay after their replacement is
	// stored (a restore may have listed them). Default 10 minutes.
	Grace time.Duration
}

// DefaultCompactLevels are the default spans of the compaction levels.
var DefaultCompactLevels = []time.Duration{30 * time.Second, 5 * time.Minute, time.Hour}

// DefaultCompactMaxBytes bounds a compacted segment's raw size.
const DefaultCompactMaxBytes = 64 << 20

// WithDefaults returns p with its defaults filled in.
func (p CompactPolicy) WithDefaults() CompactPolicy {
	if p.Settle <= 0 && len(p.Levels) > 0 {
		p.Settle = max(time.Second, p.Levels[0]/15)
	}
	if p.MaxBytes <= 0 {
		p.MaxBytes = DefaultCompactMaxBytes
	}
	if p.Grace <= 0 {
		p.Grace = 10 * time.Minute
	}
	return p
}

// Validate checks the levels: positive, increasing, each a multiple of
// the one before.
func (p CompactPolicy) Validate() error {
	for i, d := range p.Levels {
		switch {
		case d < time.Second:
			return fmt.Errorf("compaction level %d: span %s: want at least 1s", i+1, d)
		case i > 0 && (d <= p.Levels[i-1] || d%p.Levels[i-1] != 0):
			return fmt.Errorf("compaction level %d: span %s: want a multiple of level %d's %s, and longer", i+1, d, i, p.Levels[i-1])
		}
	}
	if len(p.Levels) > maxLevel {
		return fmt.Errorf("%d compaction levels: at most %d", len(p.Levels), maxLevel)
	}
	return nil
}

// CompactStep is one compaction: Sources, consecutive on a window's path,
// become segments of Level at Bucket (more than one when they hold more
// than MaxBytes).
type CompactStep struct {
	Generation string
	Level      int
	Bucket     time.Time
	Sources    []SegmentInfo
}

// CompactPlan is what compaction would do to one window now.
type CompactPlan struct {
	Steps []CompactStep
	// Replaced are Superseded segments whose replacement on the path is
	// older than the grace period, by the replacing segment (its key).
	Replaced map[string][]SegmentInfo
}

// segTime is the time compaction files a segment under.
func segTime(si SegmentInfo) time.Time {
	if si.Level > 0 {
		return si.Bucket
	}
	return si.Object.ModTime
}

// PlanCompaction plans the compaction of window w at now (a pure
// function of the listing). Sealed windows, and windows whose run ends
// at a damaged segment (no writer appends to that run), have every
// bucket closed;
// otherwise a bucket is closed once now is past its end + Settle and a
// later segment follows it on the path (the writer's head is never
// compacted under it). Higher levels are planned first: a run that a
// closed bucket of level n takes is not compacted at a lower level too.
func PlanCompaction(w Window, p CompactPolicy, now time.Time) CompactPlan {
	p = p.WithDefaults()
	plan := CompactPlan{Replaced: map[string][]SegmentInfo{}}
	if w.Anchor == nil || len(p.Levels) == 0 {
		return plan
	}
	taken := make([]bool, len(w.Segments))
	for lv := len(p.Levels); lv >= 1; lv-- {
		span := p.Levels[lv-1]
		for i := 0; i < len(w.Segments); {
			j := runEnd(w.Segments, taken, i, lv, span)
			closed := j > i && (w.Sealed || w.endsAtDamage || j < len(w.Segments)) &&
				!now.Before(segTime(w.Segments[i]).Truncate(span).Add(span+p.Settle))
			if closed && j-i >= 2 {
				plan.Steps = append(plan.Steps, CompactStep{Generation: w.Generation, Level: lv,
					Bucket: segTime(w.Segments[i]).Truncate(span).UTC(), Sources: slices.Clone(w.Segments[i:j])})
				for k := i; k < j; k++ {
					taken[k] = true
				}
			}
			i = max(j, i+1)
		}
	}
	slices.SortFunc(plan.Steps, func(a, b CompactStep) int { return int(a.Sources[0].First - b.Sources[0].First) })
	// A replaced segment goes once the first compacted segment that
	// replaced it is past the grace, even when that one was replaced in
	// turn (the clock does not restart at each level); it is deleted by
	// the path's segment that covers it now, which is read back first.
	covers := func(c, s SegmentInfo) bool {
		return c.Level > 0 && s.First >= c.First && s.Last <= c.Last && c.Object.Key != s.Object.Key
	}
	var aged []SegmentInfo // replaced compacted segments past the grace
	for _, c := range w.Superseded {
		if c.Level > 0 && now.Sub(c.Object.ModTime) >= p.Grace {
			aged = append(aged, c)
		}
	}
	for _, s := range w.Superseded {
		old := slices.ContainsFunc(aged, func(c SegmentInfo) bool { return covers(c, s) })
		for _, c := range w.Segments {
			if covers(c, s) && (old || now.Sub(c.Object.ModTime) >= p.Grace) {
				plan.Replaced[c.Object.Key] = append(plan.Replaced[c.Object.Key], s)
				break
			}
		}
	}
	return plan
}

// runEnd returns the end (exclusive) of the run of segments from i that
// level lv could merge: untaken, of a lower level, in one bucket of span.
func runEnd(segs []SegmentInfo, taken []bool, i, lv int, span time.Duration) int {
	if taken[i] || segs[i].Level >= lv {
		return i
	}
	b := segTime(segs[i]).Truncate(span)
	j := i
	for j < len(segs) && !taken[j] && segs[j].Level < lv && segTime(segs[j]).Truncate(span).Equal(b) {
		j++
	}
	return j
}

// ErrCompactConflict is wrapped when a compacted segment is already
// stored under the name a compaction would write, and it does not hold
// what its sources hold.
var ErrCompactConflict = errors.New("compacted segment conflicts")

// Compact runs one step: it reads the sources (each checked, and linked
// to the one before), writes the compacted segments (read back and
// checked), and returns them. The sources are not deleted (DeleteReplaced
// does, after the grace period). A compacted segment takes up to
// MaxBytes of raw changes of its sources; a run above it becomes several
// (one source alone is rewritten at the level, so that the next plan
// does not read it again). Sources are read one at a time and their
// records compressed into the segment as they come (compactBuild): a
// step holds one parsed source (two while a segment closes) and the
// compressed records, then their stored bytes, which are stored and read
// back streaming: a segment this call stored is checked by its stored
// bytes' sha256 (they are those it encoded); one a killed run stored at
// its name, revision by revision against the merge of its sources, read
// again (adopt).
//
// Proven damage of a source or of a compacted segment already stored at
// its name (a *DamageError: ErrBadSegment, a bad signature, a chain whose
// link names the wrong hash) is recorded (RecordDamage, found by
// compaction) and returned named: the window then ends before the
// damaged segment, or goes around it through its sources, so the next
// plan does not take it again. Failing to record it is logged (Log).
func (b *Repo) Compact(ctx context.Context, st CompactStep, p CompactPolicy, e Encoding, ids []age.Identity) ([]SegmentInfo, error) {
	out, err := b.compact(ctx, st, p, e, ids)
	de := SegmentDamage(err, st.Sources)
	if de == nil {
		return out, err
	}
	if rerr := b.NoteDamage(ctx, de, FoundByCompaction); rerr != nil && b.Log != nil {
		b.Log.Warn("compaction: the damage found is not recorded (read-only credentials?)", "object", de.Key, "err", rerr)
	}
	return out, &DamageError{Key: de.Key, Err: fmt.Errorf("%w (proven damage of %s, recorded: the window ends before it or goes around it through the segments it replaced; compaction leaves it alone, see docs/pitr.md#damage)", err, de.Key)}
}

func (b *Repo) compact(ctx context.Context, st CompactStep, p CompactPolicy, e Encoding, ids []age.Identity) ([]SegmentInfo, error) {
	p = p.WithDefaults()
	var (
		out  []SegmentInfo
		cur  *compactBuild
		prev *ChainLink
	)
	emit := func() error {
		if cur == nil {
			return nil
		}
		c := cur
		cur = nil
		si, err := b.putCompacted(ctx, st, c, e, ids)
		if err != nil {
			return err
		}
		out = append(out, si)
		return nil
	}
	for i, si := range st.Sources {
		s, hash, err := b.ReadSegment(ctx, si, ids)
		if err != nil {
			return out, fmt.Errorf("compact generation %s: %w", st.Generation, err)
		}
		link := ChainLink{Key: si.Object.Key, Header: s.SegmentHeader, Hash: hash}
		if prev != nil {
			if err := CheckLink(*prev, link); err != nil {
				return out, fmt.Errorf("compact generation %s: %w", st.Generation, err)
			}
		}
		if i < len(st.Sources)-1 && s.CapturedThrough != s.Last {
			return out, fmt.Errorf("compact generation %s: %s vouches for revisions after its last (%d-%d): not merged", st.Generation, si.Object.Key, s.Last+1, s.CapturedThrough)
		}
		n := rawSize(s)
		if cur != nil && cur.size+n > p.MaxBytes {
			if err := emit(); err != nil {
				return out, err
			}
		}
		if cur == nil {
			if cur, err = newCompactBuild(e); err != nil {
				return out, fmt.Errorf("compact generation %s: %w", st.Generation, err)
			}
		}
		if err := cur.add(si, s, link, n); err != nil {
			return out, fmt.Errorf("compact generation %s: %w", st.Generation, err)
		}
		prev = &link
	}
	return out, emit()
}

// rawSize estimates a segment's raw bytes (keys, values and per-op
// overhead, as capture counts them).
func rawSize(s *Segment) int64 {
	var n int64
	for _, r := range s.Revisions {
		for _, op := range r.Ops {
			n += int64(len(op.Key) + len(op.Value) + 32)
		}
	}
	return n
}

// merge makes the compacted segment of group (linked, in order).
func merge(st CompactStep, group []*Segment, links []ChainLink) *Segment {
	var token int64
	for _, s := range group {
		token = max(token, s.Token)
	}
	m := &Segment{SegmentHeader: compactedHeader(st, group[0].SegmentHeader, group[len(group)-1].SegmentHeader, token, links[len(links)-1])}
	seen := map[int64]bool{}
	for _, s := range group {
		m.Revisions = append(m.Revisions, s.Revisions...)
		for _, l := range s.Leases {
			if !seen[l.ID] {
				seen[l.ID] = true
				m.Leases = append(m.Leases, l)
			}
		}
	}
	return m
}

// compactedHeader is the header of the compacted segment of step st
// whose sources run from first to last (linked as lastLink), with the
// highest token among them.
func compactedHeader(st CompactStep, first, last SegmentHeader, token int64, lastLink ChainLink) SegmentHeader {
	return SegmentHeader{
		Format: CompactedFormat, ClusterID: first.ClusterID, Generation: first.Generation,
		SnapshotID: first.SnapshotID, SnapshotRevision: first.SnapshotRevision,
		First: first.First, Last: last.Last, CapturedThrough: last.CapturedThrough, CapturedAt: last.CapturedAt,
		PrevHash: first.PrevHash, Token: token, Level: st.Level, Bucket: st.Bucket, EndHash: lastLink.ChainHash(),
	}
}

// putCompacted stores the compacted segment c built, never overwriting,
// and reads it back. One already stored under its name (a killed run's)
// is adopted when it holds the same chain position and revisions
// (adopt).
//
// Memory: c holds its sources' records compressed, the stored bytes are
// made from them at the end, and the read-back is streamed: a step holds
// one parsed source, then the compressed records and their stored form,
// never its sources whole nor a second parsed copy.
func (b *Repo) putCompacted(ctx context.Context, st CompactStep, c *compactBuild, e Encoding, ids []age.Identity) (SegmentInfo, error) {
	h := c.header(st)
	key := b.CompactedKey(h.Generation, h.First, h.Last, h.Level, h.Bucket, e)
	o, err := b.Store.Stat(ctx, key)
	switch {
	case err == nil:
		si, err := b.compactedInfo(key, h.Generation, o)
		if err == nil {
			err = b.adopt(ctx, st, si, c.sources, c.links, ids)
		}
		return si, err
	case !errors.Is(err, uploader.ErrNotFound):
		return SegmentInfo{}, fmt.Errorf("compact: %s: %w", key, err)
	}
	if err := c.finish(h, b.segmentSigner(key)); err != nil {
		return SegmentInfo{}, fmt.Errorf("compact %s: %w", key, err)
	}
	rc := c.reader(e)
	defer rc.Close()
	sum := sha256.New()
	body := io.TeeReader(rc, sum)
	_, err = b.Store.Put(ctx, key, body, b.Lock.SegmentOptions(h.Level))
	if errors.Is(err, uploader.ErrExists) {
		return SegmentInfo{}, fmt.Errorf("compact: store %s: %w: stored by another writer meanwhile; the next pass checks it", key, err)
	}
	if err != nil {
		return SegmentInfo{}, fmt.Errorf("compact: store %s: %w", key, err)
	}
	if n, err := io.Copy(io.Discard, body); n != 0 || err != nil {
		return SegmentInfo{}, fmt.Errorf("compact: store %s: the store took the object before its end", key)
	}
	wantHash := hex.EncodeToString(sum.Sum(nil))
	if err := b.checkStored(ctx, key, wantHash); err != nil {
		return SegmentInfo{}, err
	}
	if o, err = b.Store.Stat(ctx, key); err != nil {
		return SegmentInfo{}, fmt.Errorf("compact: %s: %w", key, err)
	}
	return b.compactedInfo(key, h.Generation, o)
}

// adopt checks a compacted segment that a killed run stored at si's name
// against its sources (read again: the build let them go), revision by
// revision (CheckCompacted). This is the rare path, after a crash: it
// holds the sources whole, as compaction did before its build streamed.
func (b *Repo) adopt(ctx context.Context, st CompactStep, si SegmentInfo, sources []SegmentInfo, links []ChainLink, ids []age.Identity) error {
	group := make([]*Segment, len(sources))
	for i, src := range sources {
		s, hash, err := b.ReadSegment(ctx, src, ids)
		if err != nil {
			return fmt.Errorf("compact generation %s: %w", st.Generation, err)
		}
		if hash != links[i].Hash {
			return fmt.Errorf("compact generation %s: %s changed while it was compacted (sha256 %.12s…, then %.12s…)", st.Generation, src.Object.Key, links[i].Hash, hash)
		}
		group[i] = s
	}
	return b.CheckCompacted(ctx, si, merge(st, group, links), ids)
}

// compactedInfo is the listing of the compacted segment stored at key.
func (b *Repo) compactedInfo(key, gen string, o uploader.ObjectInfo) (SegmentInfo, error) {
	si, err := parseSegmentName(key[len(b.changesDir()+gen+"/"):])
	if err != nil {
		return SegmentInfo{}, err
	}
	si.Generation, si.Object = gen, o
	return si, nil
}

// checkStored reads a compacted segment this compaction has just stored
// back, streaming, and checks that its stored bytes are the ones it
// encoded (their sha256): the encoding of the checked merge of its
// sources (encodeStored validates it first), so the same header,
// revisions and leases. Nothing of it is held, and the merge need not be
// (CheckCompacted compares revision by revision one that a killed run
// stored). DeleteReplaced parses it whole once more before any source
// goes.
func (b *Repo) checkStored(ctx context.Context, key, wantHash string) error {
	rc, err := b.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("compact: read back %s: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return fmt.Errorf("compact: read back %s: %w", key, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != wantHash {
		return damaged(key, fmt.Errorf("compact: read back %s: %w: its stored bytes (sha256 %.12s…) are not those written (%.12s…)", key, ErrBadSegment, got, wantHash))
	}
	return nil
}

// CheckCompacted reads a stored compacted segment back and checks it
// against want (the merge of its sources): the same header and the same
// revisions, by count, ends and the ops of each.
func (b *Repo) CheckCompacted(ctx context.Context, si SegmentInfo, want *Segment, ids []age.Identity) error {
	got, _, err := b.ReadSegment(ctx, si, ids)
	if err != nil {
		return fmt.Errorf("compact: read back %s: %w", si.Object.Key, err)
	}
	if !sameHeader(got.SegmentHeader, want.SegmentHeader) || len(got.Revisions) != len(want.Revisions) || len(got.Leases) != len(want.Leases) {
		return fmt.Errorf("compact: %s: %w: it holds %d revisions %d-%d (end hash %.12s…), its sources %d revisions %d-%d (end hash %.12s…)",
			si.Object.Key, ErrCompactConflict, len(got.Revisions), got.First, got.Last, got.EndHash, len(want.Revisions), want.First, want.Last, want.EndHash)
	}
	for i := range got.Revisions {
		g, w := &got.Revisions[i], &want.Revisions[i]
		if g.Revision != w.Revision || len(g.Ops) != len(w.Ops) {
			return fmt.Errorf("compact: %s: %w: revision %d differs from its source's", si.Object.Key, ErrCompactConflict, w.Revision)
		}
		for j := range g.Ops {
			if !bytes.Equal(g.Ops[j].Key, w.Ops[j].Key) || !bytes.Equal(g.Ops[j].Value, w.Ops[j].Value) || g.Ops[j].Delete != w.Ops[j].Delete {
				return fmt.Errorf("compact: %s: %w: revision %d differs from its source's", si.Object.Key, ErrCompactConflict, w.Revision)
			}
		}
	}
	return nil
}

// sameHeader compares two headers, their times by instant.
func sameHeader(a, b SegmentHeader) bool {
	ta, tb := a.CapturedAt, b.CapturedAt
	ba, bb := a.Bucket, b.Bucket
	a.CapturedAt, b.CapturedAt, a.Bucket, b.Bucket = time.Time{}, time.Time{}, time.Time{}, time.Time{}
	return a == b && ta.Equal(tb) && ba.Equal(bb)
}

// DeleteReplaced deletes the segments a compacted segment replaced, after
// reading the compacted one once more (it must parse and hold the
// replaced segments' revisions and chain ends). It returns how many were
// deleted. A segment a restore or drill of this process holds stays, and
// so does one still under Object Lock (DeleteReplacedPending counts them).
func (b *Repo) DeleteReplaced(ctx context.Context, by SegmentInfo, replaced []SegmentInfo, ids []age.Identity) (int, error) {
	n, _, err := b.DeleteReplacedPending(ctx, by, replaced, ids)
	return n, err
}

// DeleteReplacedPending is DeleteReplaced, also returning how many
// replaced segments stay because the store still locks them (by its own
// Stat, not by what any document claims): they go at a later pass, once
// their retention has run out; a lock is never an error.
func (b *Repo) DeleteReplacedPending(ctx context.Context, by SegmentInfo, replaced []SegmentInfo, ids []age.Identity) (deleted, pending int, err error) {
	raw, h, _, err := b.ReadSegmentRaw(ctx, by, ids)
	if err == nil {
		_, err = ParseSegment(bytes.NewReader(raw))
	}
	if err != nil {
		err = damaged(by.Object.Key, err)
		if rerr := b.NoteDamage(ctx, err, FoundByCompaction); rerr != nil && b.Log != nil {
			b.Log.Warn("compaction: the damage found is not recorded (read-only credentials?)", "object", by.Object.Key, "err", rerr)
		}
		return 0, 0, fmt.Errorf("compact: check %s before deleting what it replaced (they stay): %w", by.Object.Key, err)
	}
	for _, s := range replaced {
		if s.First < h.First || s.Last > h.Last || Held(s.Object.Key) {
			continue
		}
		locked, err := LockedNow(ctx, b.Store, s.Object.Key, b.Lock.now())
		switch {
		case err != nil:
			return deleted, pending, fmt.Errorf("compact: %w", err)
		case locked:
			pending++
			continue
		}
		if err := b.Store.Delete(ctx, s.Object.Key); err != nil && !errors.Is(err, uploader.ErrNotFound) {
			return deleted, pending, fmt.Errorf("compact: delete replaced %s: %w", s.Object.Key, err)
		}
		deleted++
	}
	return deleted, pending, nil
}
