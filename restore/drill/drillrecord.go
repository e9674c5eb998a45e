package drill

import (
	"context"
	"time"
)

// Outcome is what one drill found.
type Outcome struct {
	// BackupID is the backup drilled (a point-in-time drill's start
	// snapshot).
	BackupID string
	// TargetRevision is a point-in-time drill's target (0: a plain drill).
	TargetRevision int64
	// Passed is the verdict.
	Passed bool
	// Phases holds the duration of each phase that ran, keyed by the
	// names of the drill report's phases (fetch, decode, restore,
	// verify, boot, checks; replay in a point-in-time drill).
	Phases map[string]time.Duration
	// Recovery is the time from the start of the fetch to a healthy
	// restored member: what a real recovery of this backup would take.
	Recovery time.Duration
	// Error says why the drill failed or could not run.
	Error string
	// RunError marks an outcome without a verdict: the drill could not
	// run to one. Passed is then false and says nothing of the backup.
	RunError bool
	// KitCertExpiry is the earliest certificate expiry in the backup's
	// recovery kit, as the drill found it (zero: no kit, or none checked).
	KitCertExpiry time.Time
}

// Record is the result of the last drill of one backup.
type Record struct {
	// Passed is that drill's verdict.
	Passed bool
	// At is when it ended (when it started, for an unknown verdict).
	At time.Time
	// Unknown is set when the verdict cannot be known (the newest report
	// of the backup cannot be read); Err says why. Unknown is not a pass,
	// and prune keeps such a backup when it may be the newest proven one.
	Unknown bool
	Err     string
	// Untrusted is set with Unknown when the newest report is not signed
	// by a trusted key (repository.ErrUntrusted): planted or altered.
	Untrusted bool
}

// HistoryFunc returns the last drill of each backup, by backup id,
// as recorded in the store (drill reports), so that every agent (and every
// restart) knows which backups are proven. StoreHistory reads it from
// the store's drill reports.
type HistoryFunc func(ctx context.Context) (map[string]Record, error)
