package prune

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// heldKey returns the first of keys a restore or drill of this process
// holds, "" when none is.
func heldKey(keys ...string) string {
	for _, k := range keys {
		if repository.Held(k) {
			return k
		}
	}
	return ""
}

// windowObjects returns a window's objects in delete order: markers,
// segments newest first, the segments compacted ones replaced, stray
// objects.
func windowObjects(w repository.Window) []uploader.ObjectInfo {
	var out []uploader.ObjectInfo
	for _, m := range w.Markers {
		out = append(out, m.Object)
	}
	for i := len(w.Segments) - 1; i >= 0; i-- {
		out = append(out, w.Segments[i].Object)
	}
	for _, s := range w.Superseded {
		out = append(out, s.Object)
	}
	return append(out, w.Stray...)
}

// planGenerations decides the change segments and progress markers.
//
// Generations with a committed anchor follow their decision; a deleted
// one goes whole, and its anchor (when the snapshot rules delete it too)
// only after it, in apply. A kept one loses only its superseded markers
// past the grace. The objects of a generation without a committed
// anchor are orphans: kept while any of them, or the generation's id, is
// younger than the grace (a capture may be writing segments before its
// snapshot commits) or while a snapshot is in flight, kept for good when
// its anchor's manifest is there but broken or unreadable.
func (p *pruner) planGenerations(ctx context.Context, plan *Plan, windows []repository.Window, ds []retention.GenerationDecision, known map[string]bool) {
	byID := map[string]retention.GenerationDecision{}
	for _, d := range ds {
		byID[d.Generation.ID] = d
	}
	deleting := map[string]bool{}
	for _, pb := range plan.Backups {
		if pb.Action == ActionDelete {
			deleting[pb.Entry.Manifest.ID] = true
		}
	}
	for _, w := range windows {
		if w.Anchor == nil {
			p.planUnanchored(ctx, plan, w, known)
			continue
		}
		d := byID[w.Generation]
		pg := PlannedGeneration{Window: w, Decision: d, Action: ActionKeep}
		objs := windowObjects(w)
		if d.Keep {
			p.planMarkers(plan, w)
			for _, o := range w.Stray {
				plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "not part of the window of retained generation " + w.Generation + " (after a break): kept for a human, see lifeboat verify --changes"})
			}
		} else if k := heldKey(keysOf(objs)...); k != "" {
			pg.Action, pg.Problem = ActionSkip, "held: a restore or drill of this process is reading "+k
		} else if k, err := p.lockedKey(ctx, keysOf(objs)...); err != nil {
			p.fail(fmt.Errorf("generation %s: %w", w.Generation, err))
			pg.Action, pg.Problem = ActionSkip, "lock state unknown"
		} else if k != "" {
			// Whole or not at all: a generation goes once nothing of
			// it is locked any more (its anchor stays meanwhile).
			pg.Action, pg.Problem = ActionLocked, "the store still locks "+k
			p.pending++
		} else {
			pg.Action, pg.Delete = ActionDelete, objs
		}
		if pg.Action != ActionDelete && deleting[w.Generation] {
			// The anchor must not go while its generation stays.
			for i := range plan.Backups {
				if pb := &plan.Backups[i]; pb.Entry.Manifest.ID == w.Generation {
					pb.Action, pb.Problem = ActionSkip, "its generation's change segments stay ("+pg.Problem+")"
				}
			}
		}
		plan.Generations = append(plan.Generations, pg)
	}
}

func keysOf(objs []uploader.ObjectInfo) []string {
	ks := make([]string, len(objs))
	for i, o := range objs {
		ks[i] = o.Key
	}
	return ks
}

// planMarkers plans the removal of a kept generation's superseded
// markers: all but the newest, never a sealed one (it says why the
// generation ended), only past the grace by store time and marker time.
func (p *pruner) planMarkers(plan *Plan, w repository.Window) {
	if len(w.Markers) < 2 {
		return
	}
	for _, m := range w.Markers[:len(w.Markers)-1] {
		if m.Sealed || repository.Held(m.Object.Key) || p.now.Sub(m.Object.ModTime) < p.job.OrphanGrace || p.now.Sub(m.At) < p.job.OrphanGrace {
			continue
		}
		plan.Markers = append(plan.Markers, m.Object)
	}
}

// planUnanchored sorts the objects of a generation without a committed
// anchor into orphans and kept objects, as one unit.
func (p *pruner) planUnanchored(ctx context.Context, plan *Plan, w repository.Window, known map[string]bool) {
	objs := windowObjects(w)
	keep := func(reason string) {
		for _, o := range objs {
			plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, reason})
		}
	}
	switch {
	case len(objs) == 0:
		return
	case known[w.Generation]:
		keep("change object of generation " + w.Generation + ", whose anchor's manifest is broken or unreadable")
		return
	case p.snapshotRunning():
		keep("change object without a committed anchor: a snapshot is in flight")
		return
	}
	if t, ok := repository.IDTime(w.Generation); ok && p.now.Sub(t) < p.job.OrphanGrace {
		keep("change object without a committed anchor: younger than the grace period")
		return
	}
	for _, o := range objs {
		if p.now.Sub(o.ModTime) < p.job.OrphanGrace {
			keep("change object without a committed anchor: its generation has objects younger than the grace period")
			return
		}
	}
	if k := heldKey(keysOf(objs)...); k != "" {
		keep("change object without a committed anchor: held by a restore or drill of this process (" + k + ")")
		return
	}
	plan.Orphans = append(plan.Orphans, objs...)
}

// genState says why a generation planned for deletion was not fully
// deleted, which keeps its anchor.
type genState int

const (
	genDeleted genState = iota
	genFailed           // a delete failed or prune stopped: an error
	genHeld             // a restore or drill holds one of its objects: not an error, the next run retries
)

// applyChanges deletes the planned generations (oldest first) and the
// superseded markers. It returns the generations not fully deleted,
// whose anchors must stay.
func (p *pruner) applyChanges(ctx context.Context, res *Result, lg *slog.Logger) map[string]genState {
	failed := map[string]genState{}
	for _, pg := range res.Plan.Generations {
		if pg.Action != ActionDelete {
			continue
		}
		gen := pg.Window.Generation
		failed[gen] = genFailed
		if err := ctx.Err(); err != nil {
			p.fail(fmt.Errorf("prune stopped: %w", err))
			return failed
		}
		ok := true
		for _, o := range pg.Delete {
			// A restore may have started since the plan.
			if repository.Held(o.Key) {
				lg.Info("generation kept for now: held by a restore or drill; the rest waits for the next run", "generation", gen, "key", o.Key)
				failed[gen] = genHeld
				ok = false
				break
			}
			if err := p.b.Store.Delete(ctx, o.Key); err != nil {
				p.fail(fmt.Errorf("delete generation %s: %w (the rest is left for the next run)", gen, err))
				ok = false
				break
			}
			res.ChangeObjectsRemoved++
		}
		if ok {
			delete(failed, gen)
			res.Generations = append(res.Generations, gen)
			lg.Info("deleted generation", "generation", gen, "objects", len(pg.Delete), "from_revision", pg.Window.From, "through_revision", pg.Window.Through)
		}
	}
	for _, o := range res.Plan.Markers {
		if repository.Held(o.Key) {
			continue
		}
		if k, err := p.lockedKey(ctx, o.Key); err != nil || k != "" {
			p.pending++ // a later run
			continue
		}
		if err := p.b.Store.Delete(ctx, o.Key); err != nil {
			p.fail(fmt.Errorf("remove superseded progress marker: %w", err))
			continue
		}
		res.MarkersRemoved++
	}
	return failed
}
