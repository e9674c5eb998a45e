// Package scrub finds damage in a store before a restore needs it, like
// restic's check --read-data-subset and pgBackRest's verify: drills read
// the newest backup and one target, so an old backup, window or kit could
// rot unseen for months.
//
// Every run (Run) looks at every retained object of one cluster in one
// store (the primary or a copy): backups' data objects and manifests,
// change segments, progress markers, drill reports, kits and their
// manifests, as the repository's listings name them. Objects the trust
// code calls untrusted are counted, not scrubbed: it reports them already.
//
//   - Existence and size, for all, from the listings: a data object or kit
//     a manifest names that is missing or of another size, and a manifest
//     that does not parse, are damaged.
//   - The encryption header, for every age-encrypted object: a ranged read
//     of its first 64 KiB, opened with the configured identities, so that
//     no backup is orphaned by a key rotation unseen.
//   - A full read of a rotating share of the bytes: data objects and kits
//     hashed against their manifest's sha256; segments decrypted, parsed
//     and checked against their own sha256 and signature; manifests, drill
//     reports and markers parsed and their signatures verified.
//
// The rotation (Plan) remembers, in a small signed scrub state in the store
// (repository's ScrubState: the agent that scrubs may move), when each
// object was last read in full. An object is due a cycle (scrub.cycle,
// default 30 days) after it was last read, or after it was stored when it
// never was. A run reads, in order of due time (the most overdue first),
//
//   - every object due before the next run (expected one interval later,
//     the interval being the time since the previous run), whatever it
//     costs: that is the promise, every object read at least once per
//     cycle, as long as runs keep their rhythm;
//   - then more, until it has read its budget: the larger of read_data
//     percent of the stored bytes and the cycle's share of them for one
//     interval (interval/cycle), which spreads the reads evenly over the
//     cycle so that no run must read a whole cycle's worth at once.
//
// In the steady state each run reads about max(read_data, interval/cycle)
// of the bytes; a scrub off for longer than a cycle catches up in one run.
//
// What it finds is a verdict, not an error. Damaged: proven by the bytes
// (missing, wrong size or sha256, a header or segment that does not parse,
// a signature that does not verify over its bytes, an object that no
// configured identity opens while others do); each is recorded with
// repository.RecordDamage, so list, status and alerts show it. Not
// checked: what could not be read (a store or network error, the run's
// end): never counted as good. An encrypted store without identities, or
// identities that open none of its encrypted objects, is a configuration
// error (wrapping repository.ErrNoIdentity or ErrDecrypt), not damage.
//
// The package does not decide when to scrub (the agent's schedule or the
// command does), nor repair or delete anything.
package scrub
