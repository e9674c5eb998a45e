// Package replica keeps copies: further stores, each a complete store of
// its own, that hold the backups, recovery kits and change windows the
// primary store committed.
//
// A copy is written by the same commit rule as the primary: a backup's
// data object is streamed across, read back from the copy and checked
// against its manifest's size and sha256; the recovery kit the manifest
// names follows (kit object, then kit manifest); the backup's manifest is
// written last, conditionally. So a copy killed at any moment lists
// nothing half-copied, and the next Run completes it: an object a killed
// run left behind is adopted only when it checks out, and replaced
// otherwise (no manifest names it, so it is no backup).
//
// Change segments are copied as the primary holds them after compaction:
// the objects on each window's path, never superseded ones, in chain
// order, each one the copy lacks, also a compacted one whose revisions
// the copy already holds in the smaller segments it replaced (the copy's
// window then reads the compacted one and lists the small ones as
// superseded, as the primary's does); progress markers follow the
// segments they vouch for. So a copy holds whole windows, its recovery
// point is what its own listing says, and its change objects are bounded
// by compaction as the primary's are, not by capture's run time. The
// primary compacts meanwhile: the windows are listed again after the
// backups are copied, and again when a listed segment is gone.
//
// The package reads nothing but the two stores: which backups a copy
// wants is the copy's retention policy applied to the primary's backups
// (package retention), so a copy never receives what its prune would
// delete. Drill reports are not copied: a copy is proven by its own
// drills. Deleting from a copy is prune's job, per store; Run deletes
// only superseded change objects and progress markers that the primary
// itself no longer holds, and a superseded segment only once the
// compacted one that replaced it in the copy is older than the grace
// (Job.Grace, capture.compaction_grace) and has been read back against
// the primary's bytes: a restore from the copy that listed the small
// segments still finds them, however late the copy took the compacted
// one.
//
// Every object is written with the copy's own Object Lock (To.Lock, a
// repository.LockPolicy: the copy's object_lock), whatever the primary's
// is; manifests are copied verbatim, the primary's bytes unchanged (their
// lock fields say what the primary's writer asked for, never the copy's
// lock, which only the copy's store can tell). A kit a newer backup names
// has its lock in the copy extended; segments and markers that stay in a
// copied window past their short lock are extended too; nothing the
// copy's store still locks is deleted (a later run does).
package replica
