// Package repository is the format of lifeboat's backups inside a store
// (an uploader.Store): the layout and ids, the versioned manifest that
// commits a backup, drill reports, the encoding of a snapshot into a
// stored object (zstd, then age encryption), and reading a stored backup
// back: Open (decode with the object's size and sha256 checked), Fetch
// (into a local raw snapshot file, etcd's trailer and the manifest's
// digest checked), CheckFile (the file against its manifest) and the
// selection of a backup (Select: an id, latest, latest-proven, random;
// SelectBefore).
//
// Repo is one cluster's repository:
//
//	<cluster>/snapshots/<id>.db[.zst][.age]   data object
//	<cluster>/snapshots/<id>.json              manifest, written last
//	<cluster>/drills/<id>/<time>.json          drill reports
//	<cluster>/changes/<generation>/<first>-<last>.seg[.zst][.age]   change segments
//	<cluster>/agents/<agent>/<time>.json       agent status documents (agentstatus.go)
//	<cluster>/damage/<sha256 of object key>.json   damage records (damage.go)
//
// Damage records (damage.go) are a reader's verdict that a stored object
// is damaged (checksum mismatch, undecryptable with the configured
// identities, bad signature, broken chain; not a missing key, a store
// error or a cancelled context). The API:
//
//	Repo.RecordDamage(ctx, Damage{Object, FoundBy, FoundAt, Error}) error
//	    stores a record signed like drill reports (kind "damage record"),
//	    with the object's size and time as the store has them; an object
//	    already gone is not recorded, a current record is kept (the first
//	    finder's), an obsolete one replaced. Callers log a failure (read-only
//	    credentials) and keep the error that proved the damage.
//	Repo.ReadDamage(ctx) (*DamageRecords, error)
//	    Current (object stored as recorded), Obsolete (object gone or of
//	    another size or time: prune deletes them), Unreadable.
//	Listing.Damage (List fills it) and Listing.DamageOf(key) *Damage.
//	*DamageError{Key, Err}, IsDamage(err), AsDamage(err): what readers
//	    return for proven damage (ReadSegment, ReadSegmentRaw, Open,
//	    Compact, CheckSegmentBytes); SegmentDamage(err, segs) also finds it
//	    in a replay child's error or a chain's bad hash.
//	Repo.NoteDamage(ctx, err, foundBy) error: RecordDamage of the damage
//	    err proves (nil when none); the caller logs its error.
//
// A backup whose data object has a current, trusted record is listed
// broken; a window with a damaged segment ends before it, or goes around
// it through the segments it replaced, with a Problem naming it
// (windows.go). VerifyChanges and Compact record what they prove
// themselves; drills, copies, verify and restore record through
// NoteDamage.
//
// Change segments (segment.go) are a generation's change log after its
// snapshot: every revision in [first, last] with its operations, the
// leases first seen, the captured-through revision, the previous
// segment's hash and the writer's fencing token; revision numbers in the
// name are zero-padded to 20 digits so that names sort. Segments are
// written conditionally like everything else (PutSegment), listed in
// revision order (ListSegments) and checked as one chain (CheckChain),
// which names a gap, overlap or fork and never merges. A Repo with a
// signing key (Signer) signs each segment it stores, level 0 and
// compacted: formats 3 and 4 end the raw form, after its 'E' and sha256,
// with the key's ID and an ed25519 signature over the kind "change
// segment", the segment's object key and that sha256; without a key it
// writes formats 1 and 2 as before. With trusted keys (Trust), every
// reader of segments (ReadSegment, ReadSegmentRaw, compaction,
// VerifyChanges, and so a replay) refuses one that is unsigned (unless
// AllowUnsigned), signed by an unknown key or altered after signing, as
// an *UntrustedError naming it (trust.go). Windows, from names alone,
// cannot tell: the run ends at an untrusted segment where it is read.
// This package only
// defines and stores them: capturing them (the capture job) and replaying
// them (restore) are not here.
//
// Object Lock (lock.go): a Repo's LockPolicy (Repo.Lock) is what every
// write requests, by the object's kind: the retain period for what a
// restore reads for long (manifests, drill reports, sealed markers,
// top-level compacted segments; the backup job locks data objects the
// same), and for as long as compaction needs them for the segments and
// markers it replaces; ExtendStayers extends what stays past that. What
// decides on a lock asks the store (LockedNow), not a manifest.
//
// The commit protocol: the data object is written first (Put makes it
// visible only once complete), the manifest last. A data object without a
// manifest is an orphan, never a backup. Objects are created and never
// replaced, so two writers of one backup id cannot both succeed.
//
// Manifests and drill reports are immutable: a Repo made by New caches
// the ones it has read, so that listing a repository again (the agent
// does every few minutes) costs the store's LIST requests plus one GET per
// object not seen before. The listing always decides what exists; an
// object that could not be read is never cached, and the newest drill
// report's verdict is unknown until it can be read, never an older one's.
//
// It does not move bytes itself (uploader does), take or check snapshots
// (snapshot and verify do), decide what to keep (retention does), delete
// anything (prune does) or restore into data directories (restore does).
package repository
