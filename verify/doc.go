// Package verify checks etcd snapshot files offline, before lifeboat trusts
// them: it never talks to etcd and never writes to the file it checks.
//
// Trailer and TrailerReader check the sha256 trailer that etcd appends to a
// snapshot streamed by Maintenance.Snapshot (the database bytes, then
// sha256(database bytes)).
//
// File opens the bbolt database read-only and, in one pass over its pages
// plus bbolt's own structural check (run concurrently), returns what
// `etcdutl snapshot status` reports (revision, key count, bolt hash, storage
// version, size) together with etcd's HashKV at the snapshot revision. The
// HashKV is recomputed from the file with the same rules etcd's mvcc store
// applies (see hashkv.go), without the mvcc store: etcdutl's own hashkv opens
// the file read-write and changes it. CompareHashKV then compares that value
// with the live member's answer, refusing to compare when the compact
// revisions differ, since etcd hashes differently around a compaction.
//
// Every integrity failure wraps ErrCorrupt. A damaged file never panics or
// crashes the process: before bbolt follows any page reference, File walks
// the page tree itself with bounds checks (bbolt dereferences page ids and
// element offsets straight from its memory map, and a bad one would fault
// outside Go's control), and any panic left is recovered into ErrCorrupt.
//
// The package does not fetch, decode or decrypt stored backups (uploader
// does) and does not restore them (restore does).
package verify
