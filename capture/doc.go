// Package capture is lifeboat's continuous capture: it watches the whole
// keyspace of a running etcd cluster from the exact revision of a
// verified snapshot + 1 and writes every revision to the store as change
// segments (repository.Segment), so that a point-in-time restore can
// replay them onto that snapshot.
//
// A generation is one unbroken chain of segments after one snapshot.
// Anything that breaks continuity (the watch compacted past, a new
// cluster ID, a revision going backwards, a lost lock) seals the
// generation; the job then takes a fresh snapshot and starts a new one.
// Progress markers (repository.Progress) record how far the chain is
// durable and when, so that the recovery point advances on an idle
// cluster too.
//
// It owns the watch, the segment building and flushing, lease TTL
// lookups and the generation's lifecycle. It does not own the segment
// format or the store layout (repository), the snapshot (backup), the
// schedule, the lock or the metrics (agent), or replay (restore).
package capture
