// Package retention decides which backups to keep and which to delete.
//
// It is a pure function of its inputs: a list of backups, a [Policy] and the
// current time. It does no I/O, reads no clock and deletes nothing; the prune
// job (package retention/prune, for lifeboat prune and the agent) turns the
// returned [Decision] list into deletions, and prints it for --dry-run.
//
// # Rules
//
// The rules follow restic's "forget" command (grandfather-father-son):
//
//   - keep-last N keeps the N newest backups.
//   - keep-hourly, keep-daily, keep-weekly, keep-monthly and keep-yearly N
//     each divide time into calendar buckets (hours, days, ISO 8601 weeks
//     that start on Monday, months, years) in [Policy.Location], and keep
//     the newest backup of each of the N most recent buckets that hold a
//     backup. Empty buckets do not count: with keep-daily 7 and a backup
//     every other day, the kept backups span two weeks.
//   - keep-within D keeps every backup taken less than D before now, and
//     every backup that claims to be from the future.
//   - N = -1 means unlimited (every bucket); 0 turns a rule off.
//
// A backup is kept when any rule keeps it. On top of the policy four
// guarantees always hold, whatever the policy says:
//
//   - the newest backup is never deleted ("newest");
//   - the newest backup whose last drill passed is never deleted
//     ("newest-proven"), so a run of failed drills cannot prune away the
//     last restore that is known to work;
//   - a backup whose last drill's verdict is unknown (its report cannot be
//     read) and that is newer than the newest proven backup is never
//     deleted ("drill-unknown"): it may be the newest proven one;
//   - a backup under Object Lock retention or legal hold is never planned
//     for deletion ("locked"): the store would refuse it anyway, and the
//     plan should say what will really happen.
//
// Every kept backup carries the reasons that kept it, for example
// "daily 2026-11-29" or "within 7d"; a deleted one carries none.
//
// Applying a plan and planning again over the survivors with the same now
// deletes nothing: pruning is idempotent.
//
// # Time zones
//
// Calendar buckets are wall-clock periods in [Policy.Location] (UTC when
// nil): a backup at 23:30 UTC belongs to the next day in Europe/Berlin. When
// a wall-clock hour repeats at the end of daylight saving time, both
// occurrences are one hourly bucket. The package never loads time zones
// itself; the caller passes a *time.Location.
//
// # Syntax
//
// [Policy.String] prints a policy as "keep-last 3, keep-daily 7,
// keep-within 2d". [ParseDuration], which reads keep-within, extends Go's
// durations with d (24h), w (7d) and y (365d).
package retention
