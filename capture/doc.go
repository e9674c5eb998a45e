// Package capture is lifeboat's continuous capture: it watches the whole
// keyspace of a running etcd cluster from the exact revision of a
// verified snapshot + 1 and writes every revision to the store as change
// segments (repository.Segment), so that a point-in-time restore can
// replay them onto that snapshot.
//
// A generation is one unbroken chain of segments after one snapshot.
// Anything that breaks continuity (the watch compacted past, a new
// cluster ID, a revision going backwards, another writer's segment)
// seals the generation; the job then takes a fresh snapshot and starts a
// new one. A lost lock seals nothing: this writer stops, the next leader
// continues the chain with a higher fencing token.
// Progress markers (repository.Progress) record how far the chain is
// durable and when, so that the recovery point advances on an idle
// cluster too.
//
// It owns the watch, the segment building and flushing, lease TTL
// lookups and the generation's lifecycle. It does not own the segment
// format or the store layout (repository), the snapshot (backup), the
// schedule, the lock or the metrics (agent), or replay (restore).
//
// # Start
//
// Run continues the store's newest generation when it is not sealed, its
// anchor is an intact committed backup, its segments are one unbroken run
// without stray objects, and its newest marker's fencing token is not
// above the job's: the next segment starts at the run's last revision + 1
// and names the sha256 of the last stored segment's bytes (hashed as
// stored, nothing decrypted). A higher stored token does not stop the job
// (tokens are not comparable across a switch from no lock, whose token is
// the start time in ns, to the lock, whose token is an election key's
// create revision, nor across etcd restored to an older revision): it
// logs why and starts a new generation; a stale writer that still runs
// writes into its own old generation, which the new one does not
// continue. Otherwise it starts a new generation, named by its anchor's
// backup id, at the anchor's revision S (Manifest.Revision, read from the
// file). The anchor is the store's newest intact committed backup when it
// is no generation's anchor yet (a sealed generation's id is never
// reused) and etcd still holds the history after it: one HashKV at S
// (anchorOn) answers compacted, below S (the cluster was restored),
// another cluster ID, or, at the same compact revision, another hash
// (another history); any of those, or no such backup, and the job calls
// Job.Snapshot instead. So a capture that starts after the agent's start
// snapshot, or a scheduled one, leaves no revision after that snapshot
// outside its window.
//
// A new generation's watch opens before its snapshot is taken, at the
// cluster's current revision R0 (a linearizable read), and the job waits
// until etcd says it caught up (a progress notification: a synced
// watcher is never canceled by compaction). While the snapshot is
// uploaded, verified and committed, the stream is read without pause and
// held: in memory up to HoldBytes (MaxBufferBytes/8 by default: the
// snapshot's own buffers are in memory meanwhile), beyond that in an unnamed spool
// file in Job.SpoolDir (0600, gone on every path). When the snapshot is
// committed at S ≥ R0 the generation takes the stream over and drops the
// events through S, so a generation never needs etcd's history to
// outlive its snapshot's upload (a snapshot slower than kube-apiserver's
// 5-minute compaction would otherwise start every generation compacted,
// in a loop). A snapshot below R0 (a lagging member's) watches from S as
// before. A failed snapshot attempt drops what was held and the next
// attempt opens a new watch: the spool holds one snapshot's time of
// changes at most, not a whole outage of the store. Whether etcd can still serve the revisions
// after the chain's end, and from the same cluster, is the watch's first
// answer: a compacted or foreign cluster seals the old generation.
//
// # Watch
//
// One raw etcd gRPC watch stream (etcdserverpb.WatchClient on the
// session's connection, snapshot.Session.Conn) covers the whole keyspace
// ("\x00" to range end "\x00") with fragmenting on. It starts at the last
// captured revision, not after it, and drops that revision's events:
// etcd answers a progress request only when no watcher of the stream
// starts in the future, so a watch from the next revision would never
// hear one on an idle cluster. Each Interval the job requests progress;
// a notification at revision H says every revision through H was sent,
// so H equal to the last revision received means "nothing after it at
// this time" (an events response whose header revision is its last
// event's says the same). H above it means revisions were lost, H below
// it means the cluster went back: both are gaps.
//
// A cluster restored in place to an older revision keeping its cluster ID
// (a plain `etcdutl snapshot restore` with the same name, peer URLs and
// token) sends no progress at all while it is below the watch's start
// revision: the watch's created response, whose header is the member's
// revision when it accepted the watch, is the one signal. A created
// revision below the captured one is confirmed with a linearizable read
// (a Range with serializable off, through the leader's read index), so
// that a follower that only lags is not taken for a restore; confirmed,
// it is a GapRevisionBackwards.
//
// Events are grouped by revision (etcd sends a transaction's events in
// one response, in sub-revision order; a fragmented response's revision
// is closed at its last fragment). Revisions must be dense: each new one
// is the previous + 1. A PUT keeps its value, lease, create revision and
// version; a DELETE its key; each revision the time it was received.
// A broken stream is reopened after the last closed revision (a revision
// half received in fragments is dropped and sent again whole): no gap, no
// duplicate.
//
// # Bounded memory: back-pressure, not spilling (once started)
//
// clientv3's Watcher reads the stream as fast as it can and buffers
// events without limit when its consumer is slow. This package reads the
// raw stream itself and stops calling Recv while the changes it holds
// (responses read but not processed, plus revisions not yet stored) reach
// Job.MaxBufferBytes. gRPC's HTTP/2 flow control then stops the member
// from sending; etcd moves the watcher to its slow path and later catches
// it up from its own store (its revisions are still there unless
// compacted, which is then a GapCompacted, never a silent loss). Nothing
// is dropped and nothing goes to disk: a spill file would only move the
// unbounded growth from memory to disk while etcd already keeps the
// history. The one exception is a generation being born (see Start):
// until its snapshot is committed the stream spills instead, past
// HoldBytes (an eighth of the bound: the snapshot's buffers are in
// memory meanwhile), and the spilled bytes count against the bound
// until they are read back. The bound holds to within one watch response (etcd fragments
// responses at its max request bytes + 512 KiB of gRPC overhead, 2 MiB by
// default), one revision, and gRPC's own receive window (grpc-go grows it
// up to 16 MiB per connection with its BDP estimator). Stats counts it.
// A flush also holds the segment being encoded (repository builds the
// stored bytes in memory: about the raw size again, plus the compressed
// copy), so MaxSegmentBytes adds up to about twice itself while a flush
// runs.
//
// # Flush
//
// Closed revisions are flushed as one segment every Interval or as soon
// as they reach MaxSegmentBytes (a revision is never split), encoded with
// Job.Encoding, with Repo.PutSegment, which never overwrites (and signs
// it for its key when the Repo has a signing key: readers that trust the
// key refuse any segment it did not sign). A segment already at that name (uploader.ErrExists) is read back: when its
// stored bytes hash to those of an encoding this writer put at that name
// (an earlier put landed and its reply was lost: the S3 confirmation or
// the directory's sync failed), it is this writer's own, so of the same
// generation, range, previous hash, token and content, and it is adopted
// (its hash is the next PrevHash). Otherwise it is another writer's: when
// Job.Token says the lock is lost the job stops, else the generation is
// sealed with GapBrokenChain; the two are never merged. Any other failed
// put is retried with backoff, the changes stay buffered (the reader
// stops at the bound meanwhile) and Status.Err says why. After the
// segment a progress marker records Through = its last revision and At =
// the time the capture last knew the cluster was at that revision (a
// progress notification, else the revision's receive time). While idle,
// one marker per interval advances At. A new generation gets a marker
// at its snapshot's revision and time (Manifest.RevisionTime: when the
// snapshot's revision was fixed, not the earlier CreatedAt) at once, so that the next writer
// (after a lost lock or a crash) continues it even before its first
// segment. Older markers of the generation
// are deleted once a newer one is stored (best effort: a failed delete
// is logged, and the newest marker always wins); a marker whose put
// failed counts among them, since it may have landed with its reply
// lost, and one found at its name saying the same is adopted.
//
// # Leases
//
// For each lease ID first seen on a PUT by this run of the generation,
// the job asks LeaseTimeToLive and records the granted TTL in the
// segment of that PUT. It asks at the flush, not while handling the
// watch's responses (each lookup is a round trip, and on a Kubernetes
// cluster every Event and Lease object brings a new lease): the flush
// looks up the segment's new leases in parallel, up to 16 at once, and a
// lookup that fails fails the flush (retried like a failed put), so that
// no lease is ever stored with an unknown TTL (a segment holds only its own revisions' leases:
// a flush while a fragmented revision is half received leaves that
// revision's new leases with it, and a revision dropped at a reconnect
// forgets them, to be seen again when it is sent again). A lease already
// gone when asked (expired or revoked before the capture looked) is
// recorded with TTL -1. Replay
// should create every recorded lease with its ID before the revision
// that first uses it, with the recorded TTL, or etcd's minimum TTL for
// -1: its end is in the log anyway (the DELETEs of its keys come as
// events). After a restart the same lease can be recorded again in a
// later segment: replay keeps the first record of an ID.
//
// # Gaps and the lock
//
// ErrCompacted (the watch canceled with a compact revision), a cluster ID
// that changes, a revision below the captured one, missing revisions and
// another writer's segment seal the generation: what was received before
// the gap is stored, then a sealed marker; one Status carries Gap, then a
// fresh snapshot starts a new generation. A lost lock (Job.Token false)
// writes nothing more and seals nothing (the next leader continues the
// generation from its last stored segment): Run reports Err ErrLockLost,
// no Gap, and returns ErrLockLost.
//
// Another writer's segment under another name is a fork too: an old
// leader's in-flight put that lands after the next leader resumed gives
// two level-0 segments from the resumed revision + 1, and the store's
// window ends before them while the new writer's chain goes on. So the
// writer lists its generation's own prefix at its first tick and every
// 10 intervals after (not per flush), and two level-0 segments starting
// at one revision after its start, or one after its durable revision,
// seal the generation as GapBrokenChain. The agent also exports the
// store's windows with a problem (lifeboat_capture_window_problems).
//
// # Status
//
// Report gets a Status on every segment, marker, gap and stop. Revision
// is the durable captured-through revision; RecoveryPoint the latest time
// at which the live cluster was known to be at most at Revision: the
// oldest receive time of the changes still buffered, or, when none are,
// the latest progress time.
//
// # Rollover
//
// A generation ends at a scheduled snapshot so that retention can drop
// old ones whole: Job.Rollover delivers every backup the daemon's
// snapshot schedule commits, and once the generation is at least
// Job.RolloverAfter old, the next one becomes its successor's anchor. The
// job keeps capturing until its stored changes reach that snapshot's
// revision S′, stores them, seals the generation with SealRollover (a
// reason, not a gap: no Status carries it as Gap) and starts the next
// generation at S′, watching from S′ + 1 (etcd still has those revisions:
// the snapshot was just taken). The old window ends at or after S′ and
// the new one starts at S′: they overlap, so no revision falls out of
// every window.
//
// # Compaction
//
// While Run runs, a compactor (compact.go) merges small segments of every
// recoverable window as they age, under the same lock: every third of the
// shortest level's span it plans each window (repository.PlanCompaction)
// and runs the steps (repository.Compact: sources read and linked, the
// compacted segment stored, read back and checked), then deletes what a
// compacted segment replaced once it is past the grace period
// (repository.DeleteReplaced). The chain hashes are kept across
// compaction, so the writer's head and every marker stay valid. With age
// encryption it needs Job.Identities; without them it logs that it does
// not compact. A failed pass is counted (Stats.CompactErrors) and retried
// at the next one. A compacted segment takes up to Compact.MaxBytes of
// raw changes, tied to the capture's budget (MaxBufferBytes/2, at least
// MaxSegmentBytes): a larger run becomes several compacted segments. A
// step reads its sources one at a time and holds their records
// compressed, then their stored form, which it streams to the store. Proven damage of a segment is not a failed pass: it is
// recorded (repository.RecordDamage), logged once as an error naming the
// object, and left alone; the window ends before it (a window problem,
// alert LifeboatCaptureWindowBroken) and what lies before it is still
// compacted.
//
// # The segment format
//
// repository.Segment is used as is. The format allows an empty segment
// (no revisions, vouching for a range); this package never writes one:
// revisions are dense, so a segment always holds at least one, and
// progress markers advance the recovery point while idle.
package capture
