package agent

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

// DrillJob is one scheduled drill: pick a backup, rehearse its restore
// with restore.Drill, store the report beside the backup.
type DrillJob struct {
	// Backups is the store; the drill reads from it and adds its report.
	Backups *repository.Repo
	// Target is "latest" or "random" (an older retained backup, so that
	// over time each one gets drilled), or a backup id.
	Target string
	// Options are the drill's options; Backups, Manifest and Logger are
	// set per run.
	Options restore.DrillOptions
	// Intn picks the random target (nil: math/rand/v2.IntN).
	Intn func(int) int
}

// RunDrill runs job once. The outcome is nil when no backup could be
// selected. The report is stored exactly when the drill ran to a verdict
// (restore.Verdict): a drill that could not (no space, the store, the
// download, the identity, a timeout, a shutdown) stores nothing and
// returns an outcome with RunError, so that an infrastructure error never
// marks a backup as failed.
func RunDrill(ctx context.Context, job DrillJob, lg *slog.Logger) (*DrillOutcome, error) {
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
	m, err := repository.Select(ctx, job.Backups, target, intn)
	if err != nil {
		return nil, fmt.Errorf("select the backup to drill (%s): %w", target, err)
	}
	o := job.Options
	o.Backups, o.Manifest, o.Logger = job.Backups, m, lg
	rep, err := restore.Drill(ctx, o)
	out := &DrillOutcome{BackupID: m.ID, Phases: map[string]time.Duration{}}
	if err != nil {
		out.Error = err.Error()
	}
	if rep == nil {
		return out, err
	}
	out.Passed = rep.Passed && err == nil
	for _, p := range rep.Phases {
		out.Phases[p.Name] += time.Duration(p.Seconds * float64(time.Second))
	}
	out.Recovery = time.Duration(rep.RecoverySeconds * float64(time.Second))
	if ctx.Err() != nil || !restore.Verdict(err) {
		out.RunError = true
		return out, err
	}
	if perr := job.Backups.PutDrillReport(ctx, rep); perr != nil {
		err = errors.Join(err, fmt.Errorf("store drill report of %s: %w", m.ID, perr))
	}
	return out, err
}

// StoreDrillHistory reads the last drill of each backup from b's drill
// reports.
func StoreDrillHistory(b *repository.Repo) DrillHistoryFunc {
	return func(ctx context.Context) (map[string]DrillRecord, error) {
		reps, err := b.LastDrills(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]DrillRecord, len(reps))
		for id, r := range reps {
			if r.State() == repository.DrillUnknown {
				out[id] = DrillRecord{Unknown: true, At: r.Started, Err: fmt.Sprint(r.Err)}
				continue
			}
			out[id] = DrillRecord{Passed: r.Passed, At: r.FinishedAt}
		}
		return out, nil
	}
}
