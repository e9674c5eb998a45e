package drill

import (
	"context"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// ReportTimeout bounds storing a drill's report (RunAndStore), which
// happens even when the drill failed and even when ctx ends meanwhile.
const ReportTimeout = time.Minute

// Stored is what RunAndStore did.
type Stored struct {
	// Report is the drill's report; nil when the drill did not start.
	Report *repository.DrillReport
	// Verdict is set when the drill ran to a verdict (passed, or a check
	// failed) and its report was stored, or StoreErr says why not.
	Verdict bool
	// Interrupted is set when ctx ended before a verdict was stored: the
	// drill says nothing of the backup and nothing was stored.
	Interrupted bool
	// StoreErr is the error of storing the report (only with Verdict).
	StoreErr error
}

// RunAndStore runs Drill with o and stores its report beside the backup
// (o.Backups) exactly when the drill ran to a verdict (see Verdict) and ctx
// had not ended by then. A drill interrupted by ctx (SIGINT, a shutdown, a
// lost lock), or one that could not run to a verdict (the store, the
// download, no space, no identity, a timeout), is not a verdict on the
// backup: nothing is stored, and the backup's last verdict stands. A
// failed drill's report is stored too; it is written under a context of
// its own (ReportTimeout) so that ctx ending during the write does not
// lose a verdict already reached.
//
// The error is Drill's; the store's is Stored.StoreErr. The CLI's
// drill command and the agent's drill job both call it.
func RunAndStore(ctx context.Context, o Options) (Stored, error) {
	rep, err := Run(ctx, o)
	d := Stored{Report: rep}
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
