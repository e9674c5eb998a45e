package drill

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
)

// Job is one scheduled drill: pick a backup, rehearse its restore
// with Drill, store the report beside the backup.
type Job struct {
	// Backups is the store; the drill reads from it and adds its report.
	Backups *repository.Repo
	// Target is "latest" or "random" (an older retained backup, so that
	// over time each one gets drilled), or a backup id.
	Target string
	// Options are the drill's options; Backups, Manifest and Logger are
	// set per run.
	Options Options
	// Intn picks the random target (nil: math/rand/v2.IntN).
	Intn func(int) int
	// Live, when set (capture is on), makes each drill a point-in-time
	// drill: it connects to the live cluster (release ends that), and
	// the target is a revision picked at random (PickTarget, with
	// Int64n) between the live compact revision and the newest
	// captured-through revision. With no such revision (no recoverable
	// window yet, or all compacted) the drill is a plain drill of
	// Target. Failing to connect or to ask the live cluster is an error
	// of the run.
	Live func(ctx context.Context) (live LiveCluster, release func(), err error)
	// Int64n picks the point-in-time target (nil: math/rand/v2.Int64N).
	Int64n func(int64) int64
	// PointInTime, when set, is a planned point-in-time drill (the fleet
	// hub's: BackupLive); Target, Live and Int64n are then unused.
	PointInTime *PointInTimeOptions
}

// RunJob runs job once. The outcome is nil when no backup could be
// selected. The report is stored exactly when the drill ran to a verdict
// (see RunAndStore): a drill that could not (no space, the store, the
// download, the identity, a timeout, a shutdown) stores nothing and
// returns an outcome with RunError, so that an infrastructure error never
// marks a backup as failed.
func RunJob(ctx context.Context, job Job, lg *slog.Logger) (*Outcome, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	intn := job.Intn
	if intn == nil {
		intn = rand.IntN
	}
	target := job.Target
	if target == "" {
		target = "latest"
	}
	o := job.Options
	o.Backups, o.Logger = job.Backups, lg
	if pt := job.PointInTime; pt != nil {
		o.PointInTime, o.Manifest = pt, pt.Plan.Snapshot
	} else if job.Live != nil {
		pt, release, err := pointInTimeTarget(ctx, job, lg)
		if release != nil {
			defer release()
		}
		if err != nil {
			return nil, err
		}
		if pt != nil {
			o.PointInTime = pt
			o.Manifest = pt.Plan.Snapshot
		}
	}
	if o.Manifest == nil {
		m, err := repository.Select(ctx, job.Backups, target, intn)
		if err != nil {
			return nil, fmt.Errorf("select the backup to drill (%s): %w", target, err)
		}
		o.Manifest = m
	}
	m := o.Manifest
	d, err := RunAndStore(ctx, o)
	out := &Outcome{BackupID: m.ID, Phases: map[string]time.Duration{}}
	if o.PointInTime != nil {
		out.TargetRevision = o.PointInTime.Plan.Revision
	}
	if err != nil {
		out.Error = err.Error()
	}
	rep := d.Report
	if rep == nil {
		return out, err
	}
	out.Passed = rep.Passed && err == nil
	for _, p := range rep.Phases {
		out.Phases[p.Name] += time.Duration(p.Seconds * float64(time.Second))
	}
	out.Recovery = time.Duration(rep.RecoverySeconds * float64(time.Second))
	if rep.Kit != nil {
		out.KitCertExpiry = rep.Kit.EarliestCertExpiry
	}
	if !d.Verdict {
		out.RunError = true
		return out, err
	}
	if d.StoreErr != nil {
		err = errors.Join(err, fmt.Errorf("store drill report of %s: %w", m.ID, d.StoreErr))
	}
	return out, err
}

// StoreHistory reads the last drill of each backup from b's drill
// reports.
func StoreHistory(b *repository.Repo) HistoryFunc {
	return func(ctx context.Context) (map[string]Record, error) {
		reps, err := b.LastDrills(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]Record, len(reps))
		for id, r := range reps {
			if r.State() == repository.DrillUnknown {
				out[id] = Record{Unknown: true, At: r.Started, Err: fmt.Sprint(r.Err), Untrusted: errors.Is(r.Err, repository.ErrUntrusted)}
				continue
			}
			out[id] = Record{Passed: r.Passed, At: r.FinishedAt}
		}
		return out, nil
	}
}

// pointInTimeTarget picks the agent's point-in-time drill target and
// plans it; nil when there is none (no window above the live compact
// revision): the caller drills a snapshot instead. It connects to the
// live cluster only when the store holds captured changes; release
// (when not nil) ends that connection.
func pointInTimeTarget(ctx context.Context, job Job, lg *slog.Logger) (_ *PointInTimeOptions, release func(), _ error) {
	l, err := job.Backups.List(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("point-in-time drill: %w", err)
	}
	windows, err := job.Backups.Windows(ctx, l)
	if err != nil {
		return nil, nil, fmt.Errorf("point-in-time drill: %w", err)
	}
	if len(windows) == 0 {
		lg.Info("no captured changes yet: drilling a snapshot")
		return nil, nil, nil
	}
	live, release, err := job.Live(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("point-in-time drill: connect to the live cluster: %w", err)
	}
	now, err := live.HashKV(ctx, 0)
	if err != nil {
		return nil, release, fmt.Errorf("point-in-time drill: the live compact revision: %w", err)
	}
	int64n := job.Int64n
	if int64n == nil {
		int64n = rand.Int64N
	}
	rev, ok := PickTarget(windows, now.CompactRevision, now.ClusterID, int64n)
	if !ok {
		lg.Info("no recoverable window above the live compact revision: drilling a snapshot", "compact_revision", now.CompactRevision)
		return nil, release, nil
	}
	p, err := restore.PlanPointInTime(ctx, job.Backups, l, restore.Target{Revision: rev}, job.Options.Identities)
	if err != nil {
		return nil, release, fmt.Errorf("point-in-time drill: plan revision %d: %w", rev, err)
	}
	lg.Info("point-in-time drill", "target_revision", rev, "generation", p.Window.Generation, "backup_id", p.Snapshot.ID,
		"revisions", p.Revisions, "segments", len(p.Segments), "compact_revision", now.CompactRevision, "through", p.Window.Through)
	return &PointInTimeOptions{Plan: p, Live: live}, release, nil
}
