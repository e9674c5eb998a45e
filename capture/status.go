package capture

import "time"

// GapReason says why a generation was sealed: a small fixed set, usable
// as a metric label. A lost leader lock is not among them: it seals
// nothing (the next leader continues the generation), and Run reports it
// as Status.Err = ErrLockLost.
type GapReason string

// The reasons a generation ends.
const (
	// GapCompacted: the watch could not resume because etcd compacted the
	// revisions it still needed.
	GapCompacted GapReason = "compacted"
	// GapClusterID: the cluster answering has another cluster ID.
	GapClusterID GapReason = "cluster_id"
	// GapRevisionBackwards: the cluster's revision went below what was
	// captured (it was restored from an older backup).
	GapRevisionBackwards GapReason = "revision_backwards"
	// GapBrokenChain: the stored chain cannot be continued (a segment
	// missing, unreadable or another writer's fork).
	GapBrokenChain GapReason = "broken_chain"
)

// GapReasons lists every GapReason, for metrics that pre-create their
// label values.
var GapReasons = []GapReason{GapCompacted, GapClusterID, GapRevisionBackwards, GapBrokenChain}

// Status is what the capture job reports to the daemon each time it
// changes (a segment or progress marker made durable, a gap, a stop).
type Status struct {
	// Running is true while the job watches and writes.
	Running bool
	// Generation is the generation being written ("" before the first).
	Generation string
	// Revision is the durable captured-through revision: every revision
	// up to it is in stored segments of Generation.
	Revision int64
	// RecoveryPoint is the latest time at which the live cluster was known
	// to be at most at Revision: a restore can reach the cluster's state
	// as of RecoveryPoint. The daemon reports now − RecoveryPoint as the
	// capture lag.
	RecoveryPoint time.Time
	// Gap is set on the one report that announces a sealed generation.
	Gap GapReason
	// Err is the last error of the job, nil when healthy.
	Err error
}
