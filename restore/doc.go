// Package restore turns a backup back into a running etcd.
//
// It starts from a raw snapshot fetched and checked by the repository
// package (repository.Fetch, repository.CheckFile).
//
// Restore writes a verified snapshot into member data directories with
// etcdutl's snapshot restore: one member, or every member of an initial
// cluster from a data-dir template such as /restore/{name}. It never
// touches a non-empty directory unless told to move it aside, and it
// undoes its own writes when a member fails.
//
// Drill rehearses a restore end to end in a scratch directory: fetch,
// decode, restore, verify, boot a throwaway etcd in a child process (this
// binary's hidden EtcdCommand, running RunEtcd, or an external etcd
// binary) on unix sockets in the drill's private directory, check
// revision, key count, HashKV, key prefixes and a write, and report each
// phase's duration. Its restore step runs in a child process too (this
// binary's hidden RestoreCommand, running RunRestore): etcdutl writes the
// restored database and WAL without the caller's soft memory limit, and a
// failure there comes back as the restore phase's, with its own text. A
// crash of that etcd on the restored data is a failed verdict, never the
// end of the caller; a child of the drill killed by a signal from outside
// (SIGKILL from an OOM killer, an operator) is an error of the run
// (ErrKilled), never a verdict. Restore itself (lifeboat restore) runs
// in-process.
// repository.Select picks the backup (latest, random or an id). StartEtcd
// starts throwaway servers for drills and the demo.
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
// A point-in-time drill (DrillOptions.PointInTime) replays a plan in the
// drill's scratch directory, boots the result and compares its HashKV at
// the target, after compacting it to the live compact revision, with the
// live cluster's (LiveCluster; SessionLive over a snapshot.Session). Its
// replay is split across a process boundary: the drill reads the segments
// from the store, decrypts and decompresses them and checks their chain
// as Replay does (from their headers: repository.ReadSegmentRaw), and
// streams their raw form to a child process (this binary's hidden
// ReplayCommand, running RunReplay, on its stdin), which parses them and
// applies them to the snapshot file with Replay's checks, without a soft
// memory limit and at ReplayGCPercent, and reports its stats and its
// error (the in-process text, wrapping ErrReplay or
// repository.ErrBadSegment as Replay's would). The child gets no
// store credentials and no age identity. A crash of it (etcd's storage
// code panics or exits on inconsistent data) is a failed replay check,
// its being killed from outside an error of the run (ErrKilled), neither
// the end of the caller (the agent).
// PickTarget chooses the agent's random target in the captured window.
//
// The drill job is here too, for the CLI's lifeboat drill and the agent's
// scheduled drill alike: DrillAndStore runs a drill and stores its report
// beside the backup exactly when the drill reached a verdict (never for an
// interrupted drill or one that could not run); RunDrillJob picks the
// backup, runs DrillAndStore and sums it up as a DrillOutcome;
// StoreDrillHistory reads the last drill of each backup back. Writing drill
// reports is the only write this package makes to the store.
//
// It does not schedule drills or export their metrics: the agent does.
package restore
