package repository

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ChangesCheck is what VerifyChanges found in one generation.
type ChangesCheck struct {
	Generation string
	// From is the anchor's revision; Through the last revision of the
	// unbroken, verified run of segments after it (From when none is).
	From, Through int64
	// Segments, Revisions and Bytes count what was read and checked up
	// to the first problem.
	Segments  int
	Revisions int64
	Bytes     int64
	// Problem is the first problem, nil when the generation is sound:
	// a *ChainError, a damaged segment (wrapping ErrBadSegment), an
	// untrusted one (an *UntrustedError, with signing configured), an
	// uncommitted anchor, or objects outside the window.
	Problem error
	// ProblemKey is the object the problem is at, with ProblemFrom and
	// ProblemTo the revisions concerned (0 when none is known).
	ProblemKey             string
	ProblemFrom, ProblemTo int64
}

// VerifyChanges reads every segment of w's generation (as stored, not
// only the window's run, but without the ones a compacted segment on the
// run replaced), checks that each parses (sha256 trailer,
// zstd, age, its name), that the first starts right after the anchor's
// revision and names it, that each is signed by a trusted key (with the
// Repo's Trust enabled), and runs CheckChain over the headers. It holds
// only headers in memory. The anchor must be committed (w.Anchor set).
// Objects that are not segments, and progress markers that vouch for
// more than the segments hold or name a segment or hash other than the
// verified one holding their revision, are problems too.
//
// Only a failed listing returns an error; everything found in the
// objects is in the check's Problem. A damaged segment (a *DamageError)
// is recorded (RecordDamage, found by verify).
func (b *Repo) VerifyChanges(ctx context.Context, w Window, ids []age.Identity) (ChangesCheck, error) {
	c := ChangesCheck{Generation: w.Generation, From: w.From, Through: w.From}
	if w.Anchor == nil {
		c.Problem = fmt.Errorf("generation %s: %s: not recoverable", w.Generation, w.Problem)
		return c, nil
	}
	segs, unnamed, err := b.ListSegments(ctx, w.Generation)
	if err != nil {
		return c, err
	}
	superseded := supersededKeys(w.From, segs)
	var links []ChainLink
	var revs, sizes []int64
	for _, si := range segs {
		if superseded[si.Object.Key] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return c, err
		}
		s, hash, err := b.ReadSegment(ctx, si, ids)
		if err != nil {
			if rerr := b.NoteDamage(ctx, err, FoundByVerify); rerr != nil && b.Log != nil {
				b.Log.Warn("verify: the damage found is not recorded (read-only credentials?)", "err", rerr)
			}
			c.Problem, c.ProblemKey, c.ProblemFrom, c.ProblemTo = err, si.Object.Key, si.First, si.Last
			if !errors.Is(err, ErrBadSegment) && !errors.Is(err, ErrUntrusted) {
				c.Problem = fmt.Errorf("%w (the segment could not be read: retry, or check the store)", err)
			}
			break
		}
		if len(links) == 0 && (s.SnapshotID != w.Generation || s.SnapshotRevision != w.Anchor.Revision) {
			c.Problem = &ChainError{Problem: ChainNoStart, Key: si.Object.Key, From: w.Anchor.Revision + 1, To: s.First - 1,
				Detail: fmt.Sprintf("the first segment names snapshot %q at revision %d, the anchor is %s at revision %d", s.SnapshotID, s.SnapshotRevision, w.Generation, w.Anchor.Revision)}
			c.ProblemKey, c.ProblemFrom, c.ProblemTo = si.Object.Key, w.Anchor.Revision+1, s.First-1
			break
		}
		// Only the header stays in memory.
		links = append(links, ChainLink{Key: si.Object.Key, Header: s.SegmentHeader, Hash: hash})
		revs = append(revs, int64(len(s.Revisions)))
		sizes = append(sizes, si.Object.Size)
	}
	good := len(links)
	if len(links) > 0 {
		if err := CheckChain(links); err != nil {
			var ce *ChainError
			errors.As(err, &ce)
			for i, l := range links {
				if l.Key == ce.Key {
					good = i
					break
				}
			}
			if ce.Problem == ChainNoStart {
				good = 0
			}
			c.Problem, c.ProblemKey, c.ProblemFrom, c.ProblemTo = err, ce.Key, ce.From, ce.To
		}
	}
	for i := range good {
		c.Segments++
		c.Revisions += revs[i]
		c.Bytes += sizes[i]
		c.Through = links[i].Header.CapturedThrough
	}
	if c.Problem == nil {
		c.ProblemKey, c.Problem = checkMarkers(ctx, b, w, links[:good])
	}
	switch {
	case c.Problem != nil:
	case len(unnamed) > 0:
		c.Problem = fmt.Errorf("generation %s: %s (and %d more) is not a change segment: not part of the chain", w.Generation, unnamed[0].Key, len(unnamed)-1)
		c.ProblemKey = unnamed[0].Key
	case w.Problem != "":
		c.Problem = errors.New(w.Problem)
	}
	return c, nil
}

// checkMarkers reads w's progress markers and checks that each names
// the verified segment holding its Through, with that segment's chain
// hash (the marker a capture resumes from, and what --to-time trusts).
// A marker deleted since the listing (capture deletes superseded ones)
// is no problem; one whose segment compaction replaced is checked
// against the compacted segment that holds its Through: its chain hash
// when it ends there, else only that it holds it.
func checkMarkers(ctx context.Context, b *Repo, w Window, links []ChainLink) (string, error) {
	for _, mi := range w.Markers {
		p, err := b.ReadProgress(ctx, mi)
		if errors.Is(err, uploader.ErrNotFound) {
			continue
		}
		if err != nil {
			return mi.Object.Key, err
		}
		if p.SnapshotID != w.Generation || p.SnapshotRevision != w.From {
			return mi.Object.Key, fmt.Errorf("progress marker %s names snapshot %s at revision %d, the anchor is %s at revision %d",
				mi.Object.Key, p.SnapshotID, p.SnapshotRevision, w.Generation, w.From)
		}
		if p.Through == w.From {
			continue
		}
		if err := checkMarker(mi, p, links); err != nil {
			return mi.Object.Key, err
		}
	}
	return "", nil
}

// checkMarker checks one marker against the verified links.
func checkMarker(mi ProgressInfo, p *Progress, links []ChainLink) error {
	i := slices.IndexFunc(links, func(l ChainLink) bool { return p.Through >= l.Header.First && p.Through <= l.Header.CapturedThrough })
	if i < 0 {
		return fmt.Errorf("progress marker %s vouches for revision %d in %s, which is not a verified segment of the chain", mi.Object.Key, p.Through, p.LastSegment)
	}
	l := links[i]
	switch {
	case l.Key == p.LastSegment || l.Header.CapturedThrough == p.Through:
		if h := l.ChainHash(); h != p.LastHash {
			return fmt.Errorf("progress marker %s names hash %.12s… for %s, the chain hash of %s is %.12s…", mi.Object.Key, p.LastHash, p.LastSegment, l.Key, h)
		}
	case l.Header.Level == 0:
		return fmt.Errorf("progress marker %s vouches for revision %d in %s, but %s holds it", mi.Object.Key, p.Through, p.LastSegment, l.Key)
	}
	return nil
}

// supersededKeys returns the keys of the segments a compacted segment on
// the run from revision from replaced: compaction leaves them until it
// deletes them, and they are not part of the chain.
func supersededKeys(from int64, segs []SegmentInfo) map[string]bool {
	pw := Window{From: from}
	pw.path(segs)
	keys := make(map[string]bool, len(pw.Superseded))
	for _, si := range pw.Superseded {
		keys[si.Object.Key] = true
	}
	return keys
}
