package prune

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// PlannedKit is the plan for one recovery kit: it goes with the last
// backup that names it.
type PlannedKit struct {
	Manifest *kit.Manifest
	// Action is keep or delete.
	Action Action
	// Reason says why a kit is kept ("named by 3 backups", "younger
	// than the grace period", ...).
	Reason string
}

// planKits decides each kit of the cluster: kept while a backup that
// stays (kept, locked, skipped, broken) names it; kept too when any
// backup manifest is unreadable (it may name any kit), when the kit is
// younger than the grace period (a backup in flight may be about to name
// it), or while a snapshot runs. Kit objects no manifest names are
// orphans, under the orphan rules.
func (p *pruner) planKits(ctx context.Context, plan *Plan, l *repository.Listing) error {
	kr := kit.Repo{Store: p.b.Store, Cluster: p.b.Cluster, Signer: p.b.Signer, Trust: p.b.Trust}
	kl, err := kr.List(ctx)
	if err != nil {
		return fmt.Errorf("prune: %w", err)
	}
	staying := p.stayingKits(plan, l, nil)
	for _, m := range kl.Kits {
		pk := PlannedKit{Manifest: m, Action: ActionKeep}
		mo := kl.ManifestInfo[m.ID]
		switch {
		case staying[m.ID] > 0:
			pk.Reason = fmt.Sprintf("named by %d backup(s) that stay", staying[m.ID])
		case len(l.Unreadable) > 0:
			pk.Reason = "a backup manifest is unreadable: it may name this kit"
		case p.now.Sub(mo.ModTime) < p.job.OrphanGrace || p.now.Sub(m.CreatedAt) < p.job.OrphanGrace:
			pk.Reason = "younger than the grace period: a backup in flight may name it"
		case p.snapshotRunning():
			pk.Reason = "a snapshot is in flight: it may name this kit"
		default:
			pk.Action = ActionDelete
			if k, err := p.lockedKey(ctx, kr.ManifestKey(m.ID), m.Object); err != nil {
				p.fail(fmt.Errorf("kit %s: %w", m.ID, err))
				pk.Action, pk.Reason = ActionSkip, "lock state unknown"
			} else if k != "" {
				pk.Action, pk.Reason = ActionLocked, "the store still locks "+k
				p.pending++
			}
		}
		plan.Kits = append(plan.Kits, pk)
	}
	for _, o := range kl.Orphans {
		p.planOrphan(ctx, plan, o)
	}
	for _, o := range kl.Unreadable {
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "unreadable kit manifest"})
	}
	return nil
}

// stayingKits counts, per kit id, the backups that name it and stay: all
// listed backups but those planned for deletion, or, once applied, those
// actually deleted (deleted non-nil).
func (p *pruner) stayingKits(plan *Plan, l *repository.Listing, deleted map[string]bool) map[string]int {
	goes := map[string]bool{}
	if deleted != nil {
		goes = deleted
	} else {
		for _, pb := range plan.Backups {
			if pb.Action == ActionDelete {
				goes[pb.Entry.Manifest.ID] = true
			}
		}
	}
	n := map[string]int{}
	for _, e := range l.Backups {
		if e.Manifest.Kit != "" && !goes[e.Manifest.ID] {
			n[e.Manifest.Kit]++
		}
	}
	return n
}

// applyKits deletes the kits planned for deletion that no backup still
// names now that the backups are deleted (one that could not be deleted
// keeps its kit): the manifest first, then the object, so that a failure
// leaves an orphan object, never a listed kit without its object.
func (p *pruner) applyKits(ctx context.Context, res *Result, l *repository.Listing, lg *slog.Logger) {
	deleted := map[string]bool{}
	for _, id := range res.Deleted {
		deleted[id] = true
	}
	staying := p.stayingKits(res.Plan, l, deleted)
	kr := kit.Repo{Store: p.b.Store, Cluster: p.b.Cluster, Signer: p.b.Signer, Trust: p.b.Trust}
	for _, pk := range res.Plan.Kits {
		m := pk.Manifest
		if pk.Action != ActionDelete || staying[m.ID] > 0 {
			continue
		}
		if p.snapshotRunning() {
			lg.Info("kit sweep stopped: a snapshot started; the rest waits for the next run", "cluster", p.b.Cluster)
			return
		}
		if err := p.b.Store.Delete(ctx, kr.ManifestKey(m.ID)); err != nil {
			p.fail(fmt.Errorf("delete kit %s: manifest: %w", m.ID, err))
			continue
		}
		if err := p.b.Store.Delete(ctx, m.Object); err != nil {
			p.fail(fmt.Errorf("delete kit %s: manifest deleted, object left as an orphan: %w", m.ID, err))
			continue
		}
		res.KitsDeleted = append(res.KitsDeleted, m.ID)
		lg.Info("deleted recovery kit", "kit_id", m.ID, "bytes", m.ObjectSize)
	}
}
