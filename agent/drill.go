package agent

import (
	"context"
	"time"
)

// DrillFunc runs one restore drill end to end (pick a backup, fetch,
// decode, restore, boot, check) and reports what it found. cmd/lifeboat
// wires it to the restore package; the agent only schedules it, records
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
type DrillFunc func(ctx context.Context) (*DrillOutcome, error)

// DrillOutcome is what one drill found.
type DrillOutcome struct {
	// BackupID is the backup drilled.
	BackupID string
	// Passed is the verdict.
	Passed bool
	// Phases holds the duration of each phase that ran, keyed by the
	// names in DrillPhases (fetch, decode, restore, boot, checks).
	Phases map[string]time.Duration
	// Recovery is the time from the start of the fetch to a healthy
	// restored member: what a real recovery of this backup would take.
	Recovery time.Duration
	// Error says why the drill failed or could not run.
	Error string
	// RunError marks an outcome without a verdict: the drill could not
	// run to one. Passed is then false and says nothing of the backup.
	RunError bool
}

// DrillRecord is the result of the last drill of one backup.
type DrillRecord struct {
	// Passed is that drill's verdict.
	Passed bool
	// At is when it ended (when it started, for an unknown verdict).
	At time.Time
	// Unknown is set when the verdict cannot be known (the newest report
	// of the backup cannot be read); Err says why. Unknown is not a pass,
	// and prune keeps such a backup when it may be the newest proven one.
	Unknown bool
	Err     string
}

// DrillHistoryFunc returns the last drill of each backup, by backup id,
// as recorded in the store (drill reports), so that every agent (and every
// restart) knows which backups are proven. cmd/lifeboat wires it to the
// store's drill reports.
type DrillHistoryFunc func(ctx context.Context) (map[string]DrillRecord, error)
