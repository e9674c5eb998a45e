// Package etcdtest starts real etcd clusters in-process for tests.
//
// Start boots one or three etcd members with go.etcd.io/etcd/server/v3/embed on
// loopback, on free ports, with data under t.TempDir, optionally serving clients
// over TLS with client-certificate authentication and with etcd auth enabled. It
// waits until the cluster has a leader and answers a read, and stops everything
// at test cleanup. Member.Stop simulates a member going down.
//
// The package is meant to be imported only by tests. It does not fake etcd in
// any way: every cluster is real etcd of the version in go.mod. By default the
// members do not fsync (UnsafeNoFsync) because tests on a shared machine care
// about speed, not about surviving power loss; set Options.Durable to fsync.
package etcdtest
