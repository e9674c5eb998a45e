package main

import (
	"context"
	"os"
	"runtime/debug"
	"sync"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// holdBytes is what capture's watch holds in memory while a
// generation's anchor snapshot is stored (capture.Job.HoldBytes: an
// eighth of capture.max_buffer_bytes; the rest spills to its spool file).
func holdBytes(cfg *Config) int64 {
	return cfg.Capture.MaxBufferBytes / 8
}

// anchorBuffers is what the agent holds in bounded buffers while capture
// stores a generation's anchor snapshot: the upload's part buffers and
// the watch's hold. Capture's buffer and its segments are not in use
// then (no generation is open: capture.Job.Snapshot is called before
// one starts), so the daemon's soft limit (uploadBuffers) would let the
// heap grow about 48 MiB past what is live.
func anchorBuffers(cfg *Config) int64 {
	return partBuffers(cfg) + holdBytes(cfg)
}

// memoryLimitMu orders the soft limit's changes (SetMemoryLimit returns
// the previous limit; two callers interleaved would restore each other's).
var memoryLimitMu sync.Mutex

// anchorLimited runs snap, capture's anchor snapshot, under a soft memory
// limit of the headroom plus bufferBytes, and restores the agent's limit
// when it ends, unless GOMEMLIMIT is set (then the limit is the user's).
// The limit never falls below the bounded buffers in use during the
// snapshot plus the same headroom as a plain `lifeboat snapshot`, so the
// GC does not run without end (TestAnchorLimitAboveBuffers).
func anchorLimited(snap func(context.Context) (*repository.Manifest, error), bufferBytes int64) func(context.Context) (*repository.Manifest, error) {
	if snap == nil {
		return nil
	}
	return func(ctx context.Context) (*repository.Manifest, error) {
		if os.Getenv("GOMEMLIMIT") != "" {
			return snap(ctx)
		}
		memoryLimitMu.Lock()
		prev := debug.SetMemoryLimit(-1)
		debug.SetMemoryLimit(min(prev, memoryHeadroom+bufferBytes))
		memoryLimitMu.Unlock()
		defer func() {
			// The heap's goal was set while the snapshot's buffers were
			// live (about twice them): under the agent's higher limit the
			// heap would grow to it before the next collection (the 1 GB
			// burst went from 98 to 124 MiB of RSS there). A collection
			// now sets it from what capture holds, and returns the
			// snapshot's pages.
			debug.FreeOSMemory()
			memoryLimitMu.Lock()
			debug.SetMemoryLimit(prev)
			memoryLimitMu.Unlock()
		}()
		return snap(ctx)
	}
}
