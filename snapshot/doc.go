// Package snapshot takes online snapshots of an etcd cluster.
//
// It connects to etcd the way etcdctl does (endpoints, CA, client certificate,
// user and password), asks every endpoint for its status and picks the member
// to snapshot (by default a healthy, caught-up, voting follower, so the leader
// keeps its disk to itself), then streams Maintenance.Snapshot from that one
// member into a spool file and, byte for byte, into an optional tee such as a
// compressor. The sha256 trailer etcd appends to the stream is checked as the
// bytes arrive (receiving overlaps with hashing and writing in a second
// goroutine), memory stays constant whatever the database size (three 1 MiB
// buffers), and the spool file is written with incremental writeback
// (internal/writeback) so the snapshot does not flood the disk etcd shares
// with dirty pages.
//
// A stream that stops delivering bytes is cut after a stall timeout; a failed
// or canceled snapshot never leaves a spool file behind, and a spool file
// from CreateSpool has no name at all, so not even a killed process leaves
// one. A stream that breaks off mid-way is a *MemberError: the caller may
// start over from another member (Options.Skip). Errors name the
// endpoint and say what to check (endpoints, --cacert, --cert/--key,
// --user/--password); passwords never appear in errors or logs (Secret).
// Because the etcd client hides connection failures behind "context deadline
// exceeded" while it retries, each endpoint is first probed directly (TCP,
// TLS handshake, HTTP/2 preface) so that a refused connection, an untrusted
// server certificate, a rejected client certificate or a TLS/plain-text
// mismatch is reported at once and by name.
//
// The package does not verify the snapshot's bbolt structure, compress,
// encrypt or upload it: those are the verify and uploader packages.
package snapshot
