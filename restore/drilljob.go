package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// DrillJob is one scheduled drill: pick a backup, rehearse its restore
// with Drill, store the report beside the backup.
type DrillJob struct {
	// Backups is the store; the drill reads from it and adds its report.
	Backups *uploader.Backups
	// Target is "latest" or "random" (an older retained backup, so that
	// over time each one gets drilled), or a backup id.
	Target string
	// Options are the drill's options; Backups, Manifest and Logger are
	// set per run.
	Options DrillOptions
	// Intn picks the random target (nil: math/rand/v2.IntN).
	Intn func(int) int
}

// RunDrillJob runs job once. The outcome is nil when no backup could be
// selected. The report is stored exactly when the drill ran to a verdict
// (see DrillAndStore): a drill that could not (no space, the store, the
// download, the identity, a timeout, a shutdown) stores nothing and
// returns an outcome with RunError, so that an infrastructure error never
// marks a backup as failed.
func RunDrillJob(ctx context.Context, job DrillJob, lg *slog.Logger) (*DrillOutcome, error) {
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
	m, err := Select(ctx, job.Backups, target, intn)
	if err != nil {
		return nil, fmt.Errorf("select the backup to drill (%s): %w", target, err)
	}
	o := job.Options
	o.Backups, o.Manifest, o.Logger = job.Backups, m, lg
	d, err := DrillAndStore(ctx, o)
	out := &DrillOutcome{BackupID: m.ID, Phases: map[string]time.Duration{}}
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
	if !d.Verdict {
		out.RunError = true
		return out, err
	}
	if d.StoreErr != nil {
		err = errors.Join(err, fmt.Errorf("store drill report of %s: %w", m.ID, d.StoreErr))
	}
	return out, err
}

// ReportTimeout bounds storing a drill's report (DrillAndStore), which
// happens even when the drill failed and even when ctx ends meanwhile.
const ReportTimeout = time.Minute

// StoredDrill is what DrillAndStore did.
type StoredDrill struct {
	// Report is the drill's report; nil when the drill did not start.
	Report *uploader.DrillReport
	// Verdict is set when the drill ran to a verdict (passed, or a check
	// failed) and its report was stored, or StoreErr says why not.
	Verdict bool
	// Interrupted is set when ctx ended before a verdict was stored: the
	// drill says nothing of the backup and nothing was stored.
	Interrupted bool
	// StoreErr is the error of storing the report (only with Verdict).
	StoreErr error
}

// DrillAndStore runs Drill with o and stores its report beside the backup
// (o.Backups) exactly when the drill ran to a verdict (see Verdict) and ctx
// had not ended by then. A drill interrupted by ctx (SIGINT, a shutdown, a
// lost lock), or one that could not run to a verdict (the store, the
// download, no space, no identity, a timeout), is not a verdict on the
// backup: nothing is stored, and the backup's last verdict stands. A
// failed drill's report is stored too; it is written under a context of
// its own (ReportTimeout) so that ctx ending during the write does not
// lose a verdict already reached.
//
// The error is Drill's; the store's is StoredDrill.StoreErr. The CLI's
// drill command and the agent's drill job both call it.
func DrillAndStore(ctx context.Context, o DrillOptions) (StoredDrill, error) {
	rep, err := Drill(ctx, o)
	d := StoredDrill{Report: rep}
	switch {
	case rep == nil:
		return d, err
	case ctx.Err() != nil:
		d.Interrupted = true
		return d, err
	case !Verdict(err):
		return d, err
	}
	d.Verdict = true
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ReportTimeout)
	defer cancel()
	d.StoreErr = o.Backups.PutDrillReport(wctx, rep)
	return d, err
}

// StoreDrillHistory reads the last drill of each backup from b's drill
// reports.
func StoreDrillHistory(b *uploader.Backups) DrillHistoryFunc {
	return func(ctx context.Context) (map[string]DrillRecord, error) {
		reps, err := b.LastDrills(ctx)
		if err != nil {
			return nil, err
		}
		out := make(map[string]DrillRecord, len(reps))
		for id, r := range reps {
			if r.State() == uploader.DrillUnknown {
				out[id] = DrillRecord{Unknown: true, At: r.Started, Err: fmt.Sprint(r.Err)}
				continue
			}
			out[id] = DrillRecord{Passed: r.Passed, At: r.FinishedAt}
		}
		return out, nil
	}
}
