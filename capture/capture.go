package capture

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// Job is one capture: the cluster to watch, the store to write to and the
// bounds of the work.
type Job struct {
	// Session is the etcd session (the job does not close it).
	Session *snapshot.Session
	// Repo is the cluster's repository in the store.
	Repo *repository.Repo
	// Encoding is how segments are compressed and encrypted.
	Encoding repository.Encoding
	// Interval is the flush interval (capture.interval): a segment is
	// written at least this often while changes arrive, a progress
	// marker at most this often while idle. Default 1s.
	Interval time.Duration
	// MaxSegmentBytes bounds the raw size of one segment (a segment is
	// flushed once it reaches the bound; one revision is never split).
	// Default 8 MiB.
	MaxSegmentBytes int64
	// MaxBufferBytes bounds the changes held in memory: past it the job
	// stops reading the watch stream (see the package comment). Default
	// 32 MiB.
	MaxBufferBytes int64
	// HoldBytes bounds the changes the watch opened before a new
	// generation's snapshot holds in memory while the snapshot is stored
	// (the snapshot's own buffers are in memory then too): beyond it
	// they go to the spool file. Default MaxBufferBytes/8 (4 MiB), at
	// most MaxBufferBytes.
	HoldBytes int64
	// SpoolDir is where the watch opened before a new generation's
	// snapshot spills the changes it holds beyond HoldBytes while the
	// snapshot is stored (unnamed files, 0600, gone when the job ends).
	// Default the system's temporary directory.
	SpoolDir string
	// Token returns the writer's fencing token now; false means the lock
	// is lost and nothing more may be written.
	Token func() (int64, bool)
	// Snapshot takes a fresh verified, committed backup (backup.Run).
	Snapshot func(ctx context.Context) (*repository.Manifest, error)
	// Rollover receives the scheduled snapshots the daemon commits (may
	// be nil): the generation rolls over to each (see the package
	// comment), so that retention can drop older generations whole.
	Rollover <-chan *repository.Manifest
	// RolloverAfter is the least age of a generation (from its snapshot)
	// at which it rolls over to a scheduled snapshot (capture.rollover);
	// 0: at every one. A retained generation keeps its anchor snapshot,
	// so this bounds how many snapshots retention.changes_within keeps.
	RolloverAfter time.Duration
	// Compact is how the store's change segments are compacted while the
	// job runs (no Levels: not at all). Compaction reads segments back:
	// with age encryption it needs Identities. Its MaxBytes (what one
	// compacted segment's sources hold in memory while it is made)
	// defaults to the capture's memory budget: MaxBufferBytes/2, at
	// least MaxSegmentBytes (16 MiB by default).
	Compact repository.CompactPolicy
	// Identities decrypt segments for compaction (nil without age).
	Identities []age.Identity
	// Report is called on every change of Status (may be nil). It must
	// not block for long: the job waits for it.
	Report func(Status)
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Stats, when set, receives the job's counters (for metrics and tests).
	Stats *Stats
}

// Stats are counters of a running job, safe to read concurrently.
type Stats struct {
	// BufferedBytes is the size of the changes held in memory now: watch
	// responses read but not yet processed, plus revisions not yet
	// stored. PeakBufferedBytes is its highest value.
	BufferedBytes, PeakBufferedBytes atomic.Int64
	// Segments and Markers count what was stored.
	Segments, Markers atomic.Int64
	// Reconnects counts watch streams reopened after a break.
	Reconnects atomic.Int64
	// SpilledBytes counts the bytes written to the spool file by the
	// watch opened before a new generation's snapshot (prewatch).
	SpilledBytes atomic.Int64
	// Rollovers counts generations rolled over to a scheduled snapshot.
	Rollovers atomic.Int64
	// Compacted counts compacted segments stored, Replaced the segments
	// they replaced that were deleted, CompactErrors failed compaction
	// passes.
	Compacted, Replaced, CompactErrors atomic.Int64
	// LeaseLookups counts lease TTL lookups (LeaseTimeToLive) made.
	LeaseLookups atomic.Int64
}

// Defaults of Job's bounds.
const (
	DefaultInterval        = time.Second
	DefaultMaxSegmentBytes = 8 << 20
	DefaultMaxBufferBytes  = 32 << 20
)

// ErrLockLost is returned by Run when Job.Token says the lock is lost:
// the job stopped without writing anything more.
var ErrLockLost = errors.New("capture: leader lock lost")

func (j *Job) withDefaults() (Job, error) {
	c := j.filled()
	switch {
	case c.Session == nil:
		return c, errors.New("capture: no etcd session")
	case c.Repo == nil:
		return c, errors.New("capture: no store")
	case c.Token == nil:
		return c, errors.New("capture: no fencing token source")
	case c.Snapshot == nil:
		return c, errors.New("capture: no snapshot function")
	case c.Compact.Validate() != nil:
		return c, fmt.Errorf("capture: %w", c.Compact.Validate())
	case c.MaxSegmentBytes > c.MaxBufferBytes:
		return c, fmt.Errorf("capture: segment bound %d bytes is above the buffer bound %d: the buffer must hold a whole segment", c.MaxSegmentBytes, c.MaxBufferBytes)
	}
	return c, nil
}

// filled returns the job with its defaults filled in.
func (j *Job) filled() Job {
	c := *j
	if c.Interval <= 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxSegmentBytes <= 0 {
		c.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if c.MaxBufferBytes <= 0 {
		c.MaxBufferBytes = DefaultMaxBufferBytes
	}
	if c.HoldBytes <= 0 {
		c.HoldBytes = c.MaxBufferBytes / 8
	}
	c.HoldBytes = min(c.HoldBytes, c.MaxBufferBytes)
	if c.Compact.MaxBytes <= 0 {
		c.Compact.MaxBytes = max(c.MaxSegmentBytes, c.MaxBufferBytes/2)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Stats == nil {
		c.Stats = &Stats{}
	}
	return c
}

// Run captures until ctx ends (then it returns nil, after storing what it
// holds when it can within a few seconds) or the lock is lost (then it
// returns ErrLockLost without writing anything more). Store and etcd
// failures are retried with backoff and reported in Status.Err; they end
// Run only with ctx. Gaps seal the generation and start a new one (see
// the package comment).
func Run(ctx context.Context, job Job, lg *slog.Logger) error {
	j, err := job.withDefaults()
	if err != nil {
		return err
	}
	r := &runner{job: j, lg: lg}
	cctx, stopCompact := context.WithCancel(ctx)
	compacted := make(chan struct{})
	go func() {
		defer close(compacted)
		r.compactLoop(cctx)
	}()
	err = r.run(ctx)
	stopCompact()
	<-compacted
	r.report(func(s *Status) {
		s.Running = false
		if errors.Is(err, ErrLockLost) {
			// Not a gap: the next leader continues the generation.
			s.Err = err
		}
	})
	if ctx.Err() != nil && !errors.Is(err, ErrLockLost) {
		return nil
	}
	return err
}
