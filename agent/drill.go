package agent

import (
	"context"

	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// DrillFunc runs one restore drill end to end (pick a backup, fetch,
// decode, restore, boot, check) and reports what it found. cmd/lifeboat
// wires it to drill.RunJob; the agent only schedules it, records
// the outcome in metrics and /status, and notifies when it fails.
//
// A drill that reached a verdict returns an outcome with Passed set (a
// failed one may return an error too). A drill that could not reach one
// (store unreachable, download failed, no space, no identity, timeout)
// returns an error with a nil outcome or one with RunError set: that is an
// error of the run (lifeboat_drill_errors_total, LifeboatDrillError), not
// a verdict on any backup, and leaves the drill verdict metrics and the
// proven backups as they were. It must stop and clean up its scratch space
// when ctx ends.
type DrillFunc func(ctx context.Context) (*drill.Outcome, error)
