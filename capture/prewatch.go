package capture

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// A new generation's watch opens before its snapshot is taken, not after
// it is stored: a snapshot that takes longer to upload, verify and commit
// than etcd's compaction horizon would otherwise start every generation
// compacted, in a loop. prewatch opens the stream at the cluster's
// current revision R0 (a linearizable read) and holds what it receives:
// in memory up to Job.HoldBytes (an eighth of the buffer by default: the
// snapshot's own buffers are in memory meanwhile), beyond that in an
// unnamed spool file (0600, gone on every path, SIGKILL included). The reader never
// stops while the generation is not started: etcd's history need not
// outlive the upload. Once the snapshot is committed at S ≥ R0, the
// generation's capture takes over the stream and what it holds, dropping
// the events through S; from then on the bound is back-pressure again
// (memory plus unread spill). A snapshot below R0 (taken from a lagging
// member) cannot use the stream: it is closed and the generation watches
// from S as before.

// prewatch opens the watch of a generation not yet started. nil when it
// cannot (the reason is logged): the generation then watches after its
// snapshot.
func (r *runner) prewatch(ctx context.Context) *capt {
	c := &capt{r: r, job: &r.job, ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
	rev, err := r.currentRevision(ctx)
	if err == nil {
		c.hold.Store(true)
		c.pre, c.lastRev, c.synced = true, rev, make(chan struct{})
		err = c.openStream(ctx)
	}
	if err == nil {
		err = c.waitSynced(ctx)
	}
	if err != nil {
		c.close()
		r.lg.Warn("capture: cannot watch before the new generation's snapshot; watching after it", "err", err)
		return nil
	}
	r.lg.Debug("capture: watching before the new generation's snapshot", "revision", rev)
	return c
}

// preSyncWait bounds how long prewatch waits for its watch to catch up.
const preSyncWait = 10 * time.Second

// waitSynced waits until the new stream has caught up with the
// cluster (its first progress notification): a watch that starts at the
// current revision is served from etcd's store first (etcd syncs such
// watchers every 100ms), and a compaction before that cancels it. A
// synced watcher is not canceled by compaction. etcd 3.6 defers the
// answer to a progress request until its watchers are synced; 3.5 drops
// it, so the request is repeated.
func (c *capt) waitSynced(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, preSyncWait)
	defer cancel()
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		err := c.stream.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}})
		if err != nil {
			return fmt.Errorf("capture: progress request: %w", err)
		}
		select {
		case <-c.synced:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("capture: the watch did not catch up within %s: %w", preSyncWait, ctx.Err())
		case <-t.C:
		}
	}
}

// handOver returns c for the generation g when its stream covers every
// revision after g's snapshot (nil otherwise, c closed).
func (c *capt) handOver(g *generation) *capt {
	if c == nil {
		return nil
	}
	if g.snapRev < c.lastRev {
		c.r.lg.Info("capture: the snapshot is below the watch opened before it; watching from the snapshot", "revision", g.snapRev, "watch_from", c.lastRev)
		c.close()
		return nil
	}
	c.g = g
	c.hold.Store(false) // started: back-pressure from here on
	return c
}

// close ends c's stream and removes what it holds.
func (c *capt) close() {
	c.closeStream()
	c.closeSpill()
}

// captFor returns the capture of generation g: the one whose watch
// opened before g's snapshot when there is one, else a new one.
func (r *runner) captFor(g *generation) *capt {
	if c := r.pre; c != nil {
		r.pre = nil
		if c.g == g {
			return c
		}
		c.close()
	}
	return &capt{r: r, g: g, job: &r.job}
}

// divert notes the stream's first progress notification (waitSynced)
// and writes it to the spool file instead of the memory queue
// while the generation is not started and Job.HoldBytes is reached,
// or while older items are spilled (their order is kept). It reports
// whether it took the item. A failed write ends the stream: an error
// item is queued (the loop reopens the watch from the last revision it
// processed) and the stream is canceled, so nothing more is held. c.qmu
// is held.
func (c *capt) divert(it item) bool {
	if c.synced != nil && !c.syncSeen && it.resp != nil && isProgress(it.resp) {
		c.syncSeen = true
		close(c.synced)
	}
	if c.sp.n == 0 && !(c.hold.Load() && c.heldBytes()+it.size > c.job.HoldBytes) {
		return false
	}
	n := c.sp.woff
	if err := c.sp.write(c.job.SpoolDir, it); err == nil {
		c.job.Stats.SpilledBytes.Add(c.sp.woff - n)
	} else {
		c.sp.reset()
		c.queue = append(c.queue, item{at: it.at, err: fmt.Errorf("capture: hold the watch in %s: %w", c.job.SpoolDir, err)})
		if c.stopStream != nil {
			c.stopStream()
		}
	}
	return true
}

// unspill takes the oldest spilled item (false when none). c.qmu is held.
func (c *capt) unspill() (item, bool) {
	if c.sp.n == 0 {
		return item{}, false
	}
	it, err := c.sp.read()
	if err != nil {
		c.sp.reset()
		it = item{err: err}
	}
	select {
	case c.room <- struct{}{}:
	default:
	}
	return it, true
}

// spilledBytes is the size of the spilled items not yet read back.
func (c *capt) spilledBytes() int64 {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return c.sp.unread
}

// signal tells the loop items are queued.
func (c *capt) signal() {
	select {
	case c.ready <- struct{}{}:
	default:
	}
}

// closeSpill removes the spool file.
func (c *capt) closeSpill() {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	c.sp.close()
}

// currentRevision is the cluster's revision now (linearizable).
func (r *runner) currentRevision(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var rev int64
	err := r.job.Session.Conn(ctx, func(ctx context.Context, _ string, conn *grpc.ClientConn) error {
		resp, err := pb.NewKVClient(conn).Range(ctx, &pb.RangeRequest{Key: []byte{0}, RangeEnd: []byte{0}, Limit: 1, KeysOnly: true})
		if err != nil {
			return err
		}
		rev = resp.Header.GetRevision()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("capture: current revision: %w", err)
	}
	return rev, nil
}

// spill is the spool file of the items a watch holds beyond the memory
// bound, read back in order. Not safe for concurrent use: capt.qmu
// guards it.
type spill struct {
	f          *os.File
	roff, woff int64
	n          int   // items written and not read
	unread     int64 // their sizes as the buffer counts them
}

// Record kinds of the spool file.
const (
	spillResp byte = 1
	spillErr  byte = 2
)

// spillHeader is a record's header: kind, receive time (Unix ns), size
// as counted, payload length.
const spillHeader = 1 + 8 + 8 + 4

// write appends it.
func (s *spill) write(dir string, it item) error {
	if s.f == nil {
		if dir == "" {
			dir = os.TempDir()
		}
		f, err := snapshot.CreateSpool(dir)
		if err != nil {
			return err
		}
		s.f = f
	}
	kind, payload := spillResp, []byte(nil)
	if it.err != nil {
		kind, payload = spillErr, []byte(it.err.Error())
	} else {
		var err error
		if payload, err = proto.Marshal(it.resp); err != nil {
			return fmt.Errorf("encode watch response: %w", err)
		}
	}
	buf := make([]byte, spillHeader, spillHeader+len(payload))
	buf[0] = kind
	binary.BigEndian.PutUint64(buf[1:], uint64(it.at.UnixNano()))
	binary.BigEndian.PutUint64(buf[9:], uint64(it.size))
	binary.BigEndian.PutUint32(buf[17:], uint32(len(payload)))
	buf = append(buf, payload...)
	if _, err := s.f.WriteAt(buf, s.woff); err != nil {
		return fmt.Errorf("spill watch response: %w", err)
	}
	s.woff += int64(len(buf))
	s.n++
	s.unread += it.size
	return nil
}

// read takes the oldest item. Its size is 0: spilled items are not in
// the memory the buffer counts.
func (s *spill) read() (item, error) {
	var h [spillHeader]byte
	if _, err := s.f.ReadAt(h[:], s.roff); err != nil {
		return item{}, fmt.Errorf("read spilled watch response: %w", err)
	}
	n := binary.BigEndian.Uint32(h[17:])
	payload := make([]byte, n)
	if _, err := s.f.ReadAt(payload, s.roff+spillHeader); err != nil && !(errors.Is(err, io.EOF) && n == 0) {
		return item{}, fmt.Errorf("read spilled watch response: %w", err)
	}
	s.roff += spillHeader + int64(n)
	s.n--
	s.unread -= int64(binary.BigEndian.Uint64(h[9:]))
	it := item{at: time.Unix(0, int64(binary.BigEndian.Uint64(h[1:])))}
	switch h[0] {
	case spillErr:
		it.err = errors.New(string(payload))
	case spillResp:
		it.resp = &pb.WatchResponse{}
		if err := proto.Unmarshal(payload, it.resp); err != nil {
			return item{}, fmt.Errorf("decode spilled watch response: %w", err)
		}
	default:
		return item{}, fmt.Errorf("spilled watch response: unknown record kind %d", h[0])
	}
	if s.n == 0 {
		s.reset()
	}
	return it, nil
}

// reset drops what is held, keeping the file for the next spill.
func (s *spill) reset() {
	s.roff, s.woff, s.n, s.unread = 0, 0, 0, 0
	if s.f != nil {
		_ = s.f.Truncate(0) // best effort: the next records overwrite it anyway
	}
}

// close removes the file (it has no name: closing frees it).
func (s *spill) close() {
	s.reset()
	if s.f != nil {
		_ = s.f.Close()
		s.f = nil
	}
}

// isProgress reports whether resp is a progress notification.
func isProgress(resp *pb.WatchResponse) bool {
	return len(resp.Events) == 0 && !resp.Created && !resp.Canceled && resp.CompactRevision == 0
}
