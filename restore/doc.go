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
// phase's duration. A crash of that etcd on the restored data is a failed
// verdict, never the end of the caller. repository.Select picks the backup
// (latest, random or an id). StartEtcd starts throwaway servers for drills
// and the demo.
//
// The package reads the store but never writes it: callers store drill
// reports (repository.Repo.PutDrillReport).
package restore
