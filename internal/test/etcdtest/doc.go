// Package etcdtest starts real etcd clusters in-process for tests.
//
// Start boots one or three etcd members with go.etcd.io/etcd/server/v3/embed on
// loopback, on free ports, with data under t.TempDir, optionally serving clients
// over TLS with client-certificate authentication and with etcd auth enabled. It
// waits until the cluster has a leader and answers a read, and stops everything
// at test cleanup. Member.Stop simulates a member going down.
//
// NewProxy puts a TCP proxy in front of a member: it counts the
// connections clients open, can listen on any listener (a unix socket) and,
// with CutAfter, resets connections mid-stream as a dying member would.
// StartBinary runs an etcd binary of another version as a child process;
// Versions lists the ones the version tests run and Version.Need finds
// each (a missing binary fails under CI=true and skips otherwise).
//
// The package is meant to be imported only by tests. It does not fake etcd in
// any way: every cluster Start boots is real etcd of go.mod's version. By default the
// members do not fsync (UnsafeNoFsync) because tests on a shared machine care
// about speed, not about surviving power loss; set Options.Durable to fsync.
package etcdtest
