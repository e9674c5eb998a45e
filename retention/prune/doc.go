// Package prune applies a retention policy to one cluster's backups in a
// store: Run plans (Plan), and unless it is a dry run deletes what no rule
// keeps and cleans up what failed uploads and interrupted prunes left
// behind (orphaned data objects, drill reports of deleted backups,
// incomplete multipart uploads), then says what it did (Result).
//
// The keep/delete decision is retention.Plan's, a pure function; this
// package does the I/O around it: listing, the checks before a delete
// (Object Lock, a manifest named where the next run looks, a data object
// shared by two manifests), the safe order of a delete (manifest, data
// object, drill reports: a crash leaves orphans, never a listed backup
// without data), and the orphan grace that keeps it away from a backup
// still being written (MinOrphanGrace; Job.SnapshotRunning when the
// caller knows a snapshot is in flight). It keeps the newest backup whose
// last drill passed, from the drill history the caller passes in.
//
// Change segments and progress markers of capture generations follow
// retention.PlanChanges (Policy.ChangesWithin): a generation is kept or
// deleted whole (markers, segments from the newest down, stray objects),
// oldest generation first, and its anchor snapshot only after it; a
// kept generation's anchor is kept with the reason "anchor"; a kept
// generation loses only superseded progress markers past the grace. The
// objects of a generation without a committed anchor are orphans under
// the same grace. No key a restore or drill of this process holds
// (repository.Held) is deleted.
//
// Object Lock is read from the store, never from a manifest (whose lock
// fields say what the primary's writer asked for; a copy holds the
// primary's manifest verbatim): a backup whose data object or manifest
// the store still locks, a generation or kit with an object still
// locked, a superseded marker or a drill report still locked, waits for a
// later run (ActionLocked, Result.LockPending); a lock is never an error.
//
// It does not read drill reports, schedule runs or take backups: the
// caller (lifeboat prune, the agent) passes Job.DrillPassed and
// Job.DrillUnknown.
package prune
