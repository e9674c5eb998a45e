// Package restore turns a backup back into a running etcd: it restores a
// snapshot into member data directories (one member or a whole cluster)
// and boots throwaway etcd servers on loopback for drills and the demo.
//
// It does not fetch or decode backups itself beyond what callers hand it,
// and it never touches a non-empty data directory.
package restore
