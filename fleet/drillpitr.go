package fleet

import (
	"context"
	"fmt"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// The hub's point-in-time drill. The agent's compares a replayed copy
// with the live cluster's HashKV at a random revision; the hub reaches no
// cluster, so a committed backup taken while capture ran stands in for
// the live cluster: the hub replays the change window from the backup
// before it to its revision, restores and boots the result, and compares
// its HashKV with the one that backup recorded (drill.BackupLive). The
// replayed changes are the ones a restore to any revision in between
// reads; the report is stored as the cluster's point-in-time drill.

// pointInTime drills a point-in-time target of cluster in src: nil, nil
// when its store holds no window with a backup inside to compare with.
func (d *Drills) pointInTime(ctx context.Context, src Source, cluster string) (*drill.Outcome, error) {
	job, err := d.job(src, cluster)
	if err != nil {
		return nil, err
	}
	repo := job.Backups
	l, err := repo.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("point-in-time drill %s: %w", cluster, err)
	}
	windows, err := repo.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("point-in-time drill %s: %w", cluster, err)
	}
	lineage, err := repo.ChosenLineage(l)
	if err != nil {
		return nil, fmt.Errorf("point-in-time drill %s: %w", cluster, err)
	}
	from, to := pointInTimeTarget(l, repository.OfLineage(windows, lineage))
	if to == nil {
		d.lg.Info("fleet point-in-time drill: no backup inside a change window to compare with", "store", src.Name, "cluster", cluster)
		return nil, nil
	}
	p, err := restore.PlanPointInTime(ctx, repo, l, restore.Target{Revision: to.Revision}, job.Options.Identities)
	if err == nil {
		err = p.StartFrom(from)
	}
	if err != nil {
		return nil, fmt.Errorf("point-in-time drill %s: %w", cluster, err)
	}
	job.PointInTime = &drill.PointInTimeOptions{Plan: p, Live: drill.BackupLive(to)}
	out, err := drill.RunJob(ctx, job, d.lg.With("store", src.Name, "cluster", cluster, "point_in_time", true))
	if err != nil {
		return out, fmt.Errorf("point-in-time drill %s to revision %d: %w", cluster, to.Revision, err)
	}
	return out, nil
}

// pointInTimeTarget picks the hub's point-in-time drill: in the newest
// recoverable window holding one, the newest intact backup taken during
// it with a HashKV (to), and the newest backup of the window before it
// (from: the anchor, or a snapshot taken during the window). to is nil
// when no window holds a backup after its anchor.
func pointInTimeTarget(l *repository.Listing, windows []repository.Window) (from, to *repository.Manifest) {
	for i := len(windows) - 1; i >= 0; i-- {
		w := &windows[i]
		if !w.Recoverable() {
			continue
		}
		var in []*repository.Manifest
		for _, e := range l.Backups {
			m := e.Manifest
			if e.State != repository.StateOK || m.ID == w.Anchor.ID || m.EtcdClusterID != w.Anchor.EtcdClusterID ||
				m.CreatedAt.Before(w.Anchor.CreatedAt) || !w.Contains(m.Revision) {
				continue
			}
			in = append(in, m)
		}
		for _, m := range in {
			if m.HashKV != 0 && m.Revision > w.Anchor.Revision && (to == nil || m.Revision > to.Revision) {
				to = m
			}
		}
		if to == nil {
			continue
		}
		from = w.Anchor
		for _, m := range in {
			if m.Revision < to.Revision && m.Revision > from.Revision {
				from = m
			}
		}
		return from, to
	}
	return nil, nil
}
