// Package verify checks etcd snapshot files offline, before lifeboat trusts
// them: it never talks to etcd and never writes to the file it checks.
//
// Trailer and TrailerReader check the sha256 trailer that etcd appends to a
// snapshot streamed by Maintenance.Snapshot (the database bytes, then
// sha256 of those bytes).
//
// File reads a snapshot's bbolt database and returns what `etcdutl snapshot
// status` reports (size, revision, key count, bolt hash, storage version)
// together with the compact revision and etcd's HashKV at the snapshot
// revision, after the structural checks of bbolt's tx.Check. CompareHashKV
// compares that HashKV with a live member's answer, and refuses to compare
// when the compact revisions differ, since etcd hashes differently around a
// compaction. CompareMemberHashKV also refuses for a member of an etcd
// version whose HashKV rules are not known to be the ones File applies
// (HashKVVersions: 3.5, 3.6 and 3.7, each tested against its servers).
//
// File does not use bbolt or etcd's mvcc store. bbolt memory-maps the file,
// so a status pass over a 1 GiB snapshot makes 1 GiB resident, and it
// follows page references from the map unchecked: etcdutl's status crashes
// the process on some damaged snapshots. etcdutl's hashkv opens the file
// read-write and changes it. Instead File reads the file with pread into
// small buffers, bounds-checks every page reference and offset, applies
// tx.Check's rules and recomputes HashKV with the rules of etcd's mvcc store
// (hashkv.go), in one pass over the file. Tests compare every result with
// etcdutl, bbolt, etcd's mvcc store and live members of each known version.
//
// Every integrity failure wraps ErrCorrupt; a damaged file never panics.
//
// The package does not fetch, decode or decrypt stored backups (repository
// does) and does not restore them (restore does).
package verify
