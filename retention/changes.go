package retention

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Generation is what the change policy needs to know about one capture
// generation whose anchor snapshot is a committed backup.
type Generation struct {
	// ID is the generation's id, which is its anchor backup's id.
	ID string
	// End is the newest time its window vouches for (the receive time of
	// its last revision, or a progress marker's time after it).
	End time.Time
}

// GenerationDecision is the verdict on one generation's change segments
// and progress markers.
type GenerationDecision struct {
	Generation Generation
	Keep       bool
	// Reasons: "changes within 7d" (its window overlaps the last
	// ChangesWithin), "newest generation" (the one capture writes or
	// wrote last), "anchor kept" (ChangesWithin is 0 and the snapshot
	// rules keep its anchor). Empty exactly when Keep is false.
	Reasons []string
}

// PlanChanges plans snapshots and change generations together. Every
// generation in gens must be anchored by a backup in backups (a
// generation without a committed anchor is no window: the prune job
// treats its objects as orphans).
//
// A generation is kept when
//   - p.ChangesWithin > 0 and its window ends after now-ChangesWithin, or
//   - p.ChangesWithin is 0 and the snapshot rules keep its anchor, or
//   - it is the newest generation (latest End, then greatest ID): the
//     one a running capture appends to is never pruned under it.
//
// The anchor of every kept generation is kept too (reason "anchor"), so
// that no retained window loses the snapshot it starts from. The backup
// decisions are Plan's, with that addition.
func PlanChanges(backups []Backup, gens []Generation, p Policy, now time.Time) ([]Decision, []GenerationDecision, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, err
	}
	idx := make(map[string]int, len(backups))
	for i, b := range backups {
		idx[b.ID] = i
	}
	seen := map[string]bool{}
	for _, g := range gens {
		if _, ok := idx[g.ID]; !ok {
			return nil, nil, fmt.Errorf("plan retention: generation %s has no anchor backup", g.ID)
		}
		if seen[g.ID] {
			return nil, nil, fmt.Errorf("plan retention: generation %q listed twice", g.ID)
		}
		seen[g.ID] = true
	}
	out := make([]GenerationDecision, len(gens))
	for i, g := range gens {
		out[i] = GenerationDecision{Generation: g}
	}
	// Oldest first, like the windows.
	slices.SortFunc(out, func(a, b GenerationDecision) int {
		if c := a.Generation.End.Compare(b.Generation.End); c != 0 {
			return c
		}
		return cmp.Compare(a.Generation.ID, b.Generation.ID)
	})
	if p.ChangesWithin > 0 {
		cutoff := now.Add(-p.ChangesWithin).Round(0)
		within := "changes within " + formatDuration(p.ChangesWithin)
		for i := range out {
			if out[i].Generation.End.After(cutoff) {
				out[i].Reasons = append(out[i].Reasons, within)
			}
		}
	}
	if n := len(out); n > 0 {
		out[n-1].Reasons = append(out[n-1].Reasons, "newest generation")
	}
	marked := slices.Clone(backups)
	for i := range out {
		if out[i].Keep = len(out[i].Reasons) > 0; out[i].Keep {
			marked[idx[out[i].Generation.ID]].Anchor = true
		}
	}
	decisions, err := Plan(marked, p, now)
	if err != nil {
		return nil, nil, err
	}
	if p.ChangesWithin == 0 {
		kept := map[string]bool{}
		for _, d := range decisions {
			kept[d.Backup.ID] = d.Keep
		}
		for i := range out {
			if !out[i].Keep && kept[out[i].Generation.ID] {
				out[i].Keep, out[i].Reasons = true, []string{"anchor kept"}
			}
		}
	}
	return decisions, out, nil
}
