package restore

import (
	"context"
	"fmt"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// spliceLinks is how many of the newest links checked a replay keeps to
// check a splice against: a compacted segment's predecessor is at most
// its level's span of segments back (an hour of 1 s segments: 3 600).
const spliceLinks = 8192

// maxReplans bounds how often one replay plans its rest again: each time
// a planned segment was gone (replaced by compaction in another process).
const maxReplans = 3

// replanAfter is called when a planned segment of p is gone (gone, the
// read's error): a compaction in another process replaced it with a
// compacted segment and deleted it once its grace ran out, while this
// replay was running. It lists the store again and returns the segments
// of p's generation that hold the revisions after `after` (applied
// already) through p.Revision, in order: the first of them may begin
// before after+1 (a compacted segment that also holds revisions applied
// already; the replay skips those). The caller checks the splice
// (checkSplice) and every link after it as before.
func replanAfter(ctx context.Context, repo *repository.Repo, p *PointInTimePlan, after int64, gone error) ([]repository.SegmentInfo, error) {
	fail := func(why string) error {
		return fmt.Errorf("%w; planning the rest again (from revision %d) found %s: restore again, it plans from what the store holds now", gone, after+1, why)
	}
	l, err := repo.List(ctx)
	if err != nil {
		return nil, fail("no listing: " + err.Error())
	}
	windows, err := repo.Windows(ctx, l)
	if err != nil {
		return nil, fail("no windows: " + err.Error())
	}
	for _, w := range windows {
		if w.Generation != p.Window.Generation {
			continue
		}
		var segs []repository.SegmentInfo
		for _, si := range w.Segments {
			if si.Last > after && si.First <= p.Revision {
				segs = append(segs, si)
			}
		}
		switch {
		case len(segs) == 0 || segs[len(segs)-1].Last < p.Revision:
			return nil, fail(fmt.Sprintf("generation %s's segments end before revision %d", w.Generation, p.Revision))
		case segs[0].First > after+1:
			return nil, fail(fmt.Sprintf("revisions %d-%d missing", after+1, segs[0].First-1))
		}
		return segs, nil
	}
	return nil, fail(fmt.Sprintf("no generation %s", p.Window.Generation))
}

// checkSplice checks cur, the first segment read after planning again,
// against the links checked before it (seen, the newest of them in
// order; first, the replay's first): it must continue one of them (its
// PrevHash is that link's chain hash and it begins right after it: a
// compacted segment names its first source's predecessor) and reach past
// the last; or, when it begins no later than the replay's first (it
// replaced that one too), belong where the plan's first did: the
// generation's first names the anchor (checkAnchorLink), a later one is
// checked as checkStart checks.
func checkSplice(w *repository.Window, first *repository.ChainLink, seen []repository.ChainLink, cur repository.ChainLink) error {
	h := cur.Header
	fail := func(p repository.ChainProblem, detail string) error {
		return fmt.Errorf("check the changes of generation %s after planning again: %w", w.Generation,
			&repository.ChainError{Problem: p, Key: cur.Key, From: h.First, To: h.Last, Detail: detail})
	}
	if len(seen) > 0 && h.Last <= seen[len(seen)-1].Header.Last {
		return fail(repository.ChainOverlap, fmt.Sprintf("it ends at revision %d, applied already", h.Last))
	}
	for i := len(seen) - 1; i >= 0; i-- {
		prev := seen[i]
		if h.PrevHash != prev.ChainHash() {
			continue
		}
		switch {
		case h.Generation != prev.Header.Generation || h.ClusterID != prev.Header.ClusterID:
			return fail(repository.ChainMismatch, "another generation or cluster than "+prev.Key)
		case h.First != prev.Header.CapturedThrough+1:
			return fail(repository.ChainGap, fmt.Sprintf("it begins at %d after %s, which ends at %d", h.First, prev.Key, prev.Header.CapturedThrough))
		case h.Token < prev.Header.Token:
			return fail(repository.ChainStale, fmt.Sprintf("token %d after %d", h.Token, prev.Header.Token))
		}
		return nil
	}
	if first == nil || h.First <= first.Header.First {
		if h.SnapshotID != "" {
			return checkAnchorLink(w.Anchor, cur)
		}
		return checkStart(w, cur)
	}
	return fail(repository.ChainBadHash, "it continues none of the segments applied")
}
