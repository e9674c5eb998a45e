// Package snapshot is lifeboat's etcd session: it connects to a cluster,
// picks a member and takes an online snapshot from it.
//
// A job opens one Session (Dial) from a Config, which says how to reach
// etcd the way etcdctl does (endpoints, CA, client certificate, user and
// password, dial timeout, member preference), and passes the session to
// its steps; nothing below Dial dials again from a Config. The session
// holds one gRPC connection per endpoint and logs in once (etcd's token is
// valid on every member; a stale token is renewed once), so a backup of an
// N-member cluster costs N connections and one login (a bcrypt check on
// the server), whatever it asks: status of every member, the snapshot
// stream, HashKV of another member, a retry from the next member.
//
// Members asks every endpoint for its status and orders the members for a
// snapshot (by default a healthy, caught-up, voting follower, so the
// leader keeps its disk to itself; endpoints of more than one cluster are
// refused, and a member that sees no leader is used only when named).
// Take and TakeFile stream Maintenance.Snapshot from the first member in
// that order that can serve into a spool file and, byte for byte, into an
// optional tee such as a compressor. The sha256 trailer etcd appends to the
// stream is checked as the bytes arrive (receiving overlaps with hashing
// and writing in a second goroutine), memory stays constant whatever the
// database size (three 1 MiB buffers), and the spool file is written with
// incremental writeback (internal/writeback) so the snapshot does not
// flood the disk etcd shares with dirty pages.
//
// A stream that stops delivering bytes is cut after a stall timeout; a failed
// or canceled snapshot never leaves a spool file behind, and a spool file
// from CreateSpool has no name at all, so not even a killed process leaves
// one. A stream that breaks off mid-way is a *MemberError: the caller may
// start over from another member (Options.Skip), on the same session.
// Errors name the endpoint and say what to check (endpoints, --cacert,
// --cert/--key, --user/--password); passwords never appear in errors or
// logs (Secret). Because gRPC blurs connection failures (and the etcd
// client hides them behind "context deadline exceeded" while it retries),
// an endpoint whose connection failed is probed directly (TCP, TLS
// handshake, HTTP/2 preface) so that a refused connection, an untrusted
// server certificate, a rejected client certificate or a TLS/plain-text
// mismatch is reported at once and by name. The probe runs only on that
// failure path: a healthy member is dialed once.
//
// HashKVMember picks the live member a snapshot's HashKV is compared with:
// another member than the snapshot's, so that a member whose store diverged
// is caught; Session.HashKV asks it.
//
// The package does not verify the snapshot's bbolt structure, compress,
// encrypt or upload it: those are the verify, repository and uploader
// packages. It does not hold connections beyond a job: the daemon's leader
// lock (agent) keeps its own long-lived client.
package snapshot
