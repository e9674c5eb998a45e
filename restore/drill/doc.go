// Package drill rehearses a restore end to end and judges it.
//
// Run drills one backup in a scratch directory: fetch, decode, restore,
// verify, boot a throwaway etcd in a child process (child.StartEtcd: this
// binary's hidden child.EtcdCommand, or an external etcd binary) on unix
// sockets in the drill's private directory, check revision, key count,
// HashKV, key prefixes, a write and the recovery kit, and report each
// phase's duration. Its restore step runs in a child process too
// (restore.RestoreInChild): etcdutl writes the restored database and WAL
// without the caller's soft memory limit, and a failure there comes back
// as the restore phase's, with its own text. A crash of that etcd on the
// restored data is a failed verdict (ErrFailed), never the end of the
// caller; a child of the drill killed by a signal from outside (SIGKILL
// from an OOM killer, an operator) is an error of the run
// (child.ErrKilled), never a verdict (Verdict).
//
// A point-in-time drill (Options.PointInTime) replays a plan in the
// drill's scratch directory in a child process (restore.ReplayInChild),
// boots the result and compares its HashKV at the target, after
// compacting it to the live compact revision, with the live cluster's
// (LiveCluster; SessionLive over a snapshot.Session). A crash of the
// replay child (etcd's storage code panics or exits on inconsistent data)
// is a failed replay check, its being killed from outside an error of the
// run, neither the end of the caller (the agent). PickTarget chooses the
// agent's random target in the captured window.
//
// The drill job is here too, for the CLI's lifeboat drill and the agent's
// scheduled drill alike: RunAndStore runs a drill and stores its report
// beside the backup exactly when the drill reached a verdict (never for an
// interrupted drill or one that could not run); RunJob picks the backup,
// runs RunAndStore and sums it up as an Outcome; StoreHistory reads the
// last drill of each backup back. Writing drill reports is the only write
// this package makes to the store.
//
// It does not schedule drills or export their metrics: the agent does.
package drill
