package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lifeboat-dev/lifeboat/kubeobjects"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// The Kubernetes objects (Config.Kube) mirror the store after every job
// end: the store is listed again (its manifests and drill reports are
// cached) and kubeobjects.Sync makes the objects match; a failed backup
// or drill also gets an Event. The API's answer never changes a job's:
// a failure is logged, counted in lifeboat_kubernetes_sync_failures_total
// by op, and the next job's sync catches up.

// Values of the op label of lifeboat_kubernetes_sync_failures_total.
const (
	kubeOpSync  = "sync"
	kubeOpEvent = "event"
)

// kubeTimeout bounds one sync and its event, store listing included.
const kubeTimeout = 2 * time.Minute

// syncKube mirrors the store into the Kubernetes API after job ended with
// err (cancelled: by shutdown or a lost lock), and records an Event for a
// failed backup or a drill that failed its backup.
func (a *Agent) syncKube(ctx context.Context, job, id string, err error, cancelled bool) {
	if a.cfg.Kube == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, kubeTimeout)
	defer cancel()
	if serr := a.kubeSync(ctx); serr != nil {
		a.m.kubeErrors.WithLabelValues(kubeOpSync).Inc()
		a.lg.Warn("cannot update the Kubernetes objects (EtcdBackup); the store is unaffected, the next job retries", "err", serr)
	}
	reason := kubeReason(job, err, cancelled)
	if reason == "" {
		return
	}
	msg := fmt.Sprintf("%s job of cluster %s failed: %v", job, a.cfg.Cluster, err)
	if eerr := a.cfg.Kube.Event(ctx, id, reason, msg, a.clock.Now()); eerr != nil {
		a.m.kubeErrors.WithLabelValues(kubeOpEvent).Inc()
		a.lg.Warn("cannot record a Kubernetes event", "reason", reason, "err", eerr)
	}
}

// kubeReason is the reason of the Event for job's end, "" for none: a
// failed snapshot, or a drill that reached a failed verdict (a drill that
// could not run, or found nothing to drill, proved nothing either way).
func kubeReason(job string, err error, cancelled bool) string {
	if err == nil || cancelled {
		return ""
	}
	var runErr *drillRunError
	switch {
	case job == JobSnapshot:
		return kubeobjects.ReasonBackupFailed
	case job == JobDrill && !errors.Is(err, repository.ErrNoBackups) && !errors.As(err, &runErr):
		return kubeobjects.ReasonDrillFailed
	}
	return ""
}

// kubeSync lists the store and syncs the objects to it.
func (a *Agent) kubeSync(ctx context.Context) error {
	st, err := a.kubeStatus(ctx)
	if err != nil {
		return err
	}
	res, err := a.cfg.Kube.Sync(ctx, st)
	a.lg.Debug("kubernetes objects synced", "created", res.Created, "updated", res.Updated, "deleted", res.Deleted, "unchanged", res.Unchanged)
	return err
}

// kubeStatus is the store as the objects show it. A store that cannot be
// listed gives an error: the objects then stay as they were (unknown is
// never shown as "no backups").
func (a *Agent) kubeStatus(ctx context.Context) (kubeobjects.Status, error) {
	st := kubeobjects.Status{At: a.clock.Now()}
	l, err := a.cfg.Backups.List(ctx)
	if err != nil {
		return st, fmt.Errorf("list backups: %w", err)
	}
	drills, err := a.cfg.Backups.LastDrills(ctx)
	if err != nil {
		return st, fmt.Errorf("list drill reports: %w", err)
	}
	ws, err := a.cfg.Backups.Windows(ctx, l)
	if err != nil {
		return st, fmt.Errorf("list capture windows: %w", err)
	}
	for _, e := range l.Backups {
		b := kubeBackup(e, drills[e.Manifest.ID])
		if b.State != repository.StateOK {
			st.Problems = append(st.Problems, fmt.Sprintf("backup %s is %s: %s", b.ID, b.State, b.Problem))
		}
		if b.Drill.Verdict == repository.DrillUnknown {
			st.Problems = append(st.Problems, fmt.Sprintf("backup %s: the newest drill report cannot be read: %s", b.ID, b.Drill.Error))
		}
		st.Backups = append(st.Backups, b)
	}
	for _, o := range l.Unreadable {
		st.Problems = append(st.Problems, "unreadable manifest "+o.Key)
	}
	for _, w := range ws {
		st.Windows = append(st.Windows, kubeobjects.Window{Generation: w.Generation, FromRevision: w.From, ThroughRevision: w.Through,
			From: w.FromTime, Through: w.ThroughTime, Recoverable: w.Recoverable(), Sealed: w.Sealed, Problem: w.Problem})
		if w.Problem != "" {
			st.Problems = append(st.Problems, "capture window "+w.Generation+": "+w.Problem)
		}
	}
	return st, nil
}

// kubeBackup is one listed backup and its newest drill as an object shows
// them.
func kubeBackup(e repository.Entry, d *repository.LastDrill) kubeobjects.Backup {
	m := e.Manifest
	b := kubeobjects.Backup{ID: m.ID, CreatedAt: m.CreatedAt, Revision: m.Revision, Keys: int64(m.TotalKeys),
		DBSize: m.DBSize, StoredSize: m.ObjectSize, State: e.State, Problem: e.Problem, HashKV: m.HashKVStatus,
		Drill: kubeobjects.Drill{Verdict: d.State()}}
	switch {
	case d == nil:
	case d.Err != nil:
		b.Drill.Error = d.Err.Error()
	case d.DrillReport != nil:
		b.Drill.FinishedAt, b.Drill.Seconds = d.FinishedAt, d.RecoverySeconds
		if d.PointInTime != nil {
			b.Drill.PointInTime = d.PointInTime.TargetRevision
		}
		if !d.Passed {
			b.Drill.Error = d.Error
		}
	}
	return b
}
