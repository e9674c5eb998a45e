// Package restore turns a backup back into a running etcd.
//
// It starts from a raw snapshot fetched and checked by the repository
// package (repository.Fetch, repository.CheckFile).
//
// Restore writes a verified snapshot into member data directories with
// etcdutl's snapshot restore: one member, or every member of an initial
// cluster from a data-dir template such as /restore/{name}. It never
// touches a non-empty directory unless told to move it aside, and it
// undoes its own writes when a member fails. With
// RestoreOptions.MoveSnapshot the first member's database is the snapshot
// file itself, moved into its directory and written where it lies (what
// etcdutl writes into its copy, see inplace.go); members after the first
// are clones of the first (clone.go). Restore itself (lifeboat restore)
// runs in-process. repository.Select picks the backup (latest,
// random or an id).
//
// Point-in-time restore: PlanPointInTime resolves a target (a revision,
// from the store's names alone, or a time against the revisions' receive
// times) to a generation's window, the newest committed snapshot of it at
// or before the target, and the change segments after it; a target
// outside every recoverable window is an *OutsideWindowsError. Replay
// reads each of those segments once, checks their chain as it reads them
// (only from the segment after the start snapshot on), and applies their
// revisions to the decoded snapshot offline through etcd's own mvcc store
// (no raft, an unpromoted lessor, no compactor), one transaction per
// revision, checking the revision after each; the result is restored with
// RestoreOptions.SkipHashCheck. Capturing the changes is the capture
// package's.
//
// Replay runs in the caller's process: the one-shot lifeboat restore
// --to-revision (and ls/get/diff at a point in time) lifts lifeboat's soft
// memory limit and sets ReplayGCPercent first.
//
// A drill (package restore/drill) runs both steps in child processes
// instead: RestoreInChild restores one member in this binary run with
// child.RestoreCommand (RunRestore), so that etcdutl writes the restored
// database and WAL without the caller's soft memory limit, and a failure
// there comes back with its own text; StartInPlace restores it in place
// there, writing the database only on InPlace.Commit (after the caller's
// check of the file). ReplayInChild splits a replay
// across a process boundary: this process reads the segments from the
// store, decrypts and decompresses them and checks their chain as Replay
// does (from their headers: repository.ReadSegmentRaw), and streams their
// raw form to this binary run with child.ReplayCommand (RunReplay, on its
// stdin), which parses them and applies them to the snapshot file with
// Replay's checks, without a soft memory limit and at ReplayGCPercent,
// and reports its stats and its error (the in-process text, wrapping
// ErrReplay or repository.ErrBadSegment as Replay's would). The child
// gets no store credentials and no age identity. Starting, waiting for
// and reading those processes is package restore/child's; what they do
// is this package's (ChildWork).
//
// It does not drill, schedule or export metrics: restore/drill and the
// agent do.
package restore
