package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// Defaults for Options.
const (
	DefaultStallTimeout = 30 * time.Second
	DefaultChunk        = writeback.DefaultChunk
)

// copyBufferSize is the read buffer: large enough that syscalls and hashing
// run in big strides, small enough to keep memory constant and low.
const copyBufferSize = 1 << 20

// Options tune how a snapshot is streamed and spooled.
type Options struct {
	// StallTimeout fails the snapshot when no bytes arrive for this long,
	// including the wait for the first message. Zero means
	// DefaultStallTimeout.
	StallTimeout time.Duration
	// Timeout bounds the whole snapshot; zero means no limit beyond ctx.
	Timeout time.Duration
	// Chunk is the writeback chunk of the spool file (see
	// internal/writeback): zero means DefaultChunk, negative disables
	// incremental writeback (plain writes: Take leaves the pages to the
	// kernel).
	Chunk int64
	// Skip lists endpoints Take must not stream from: members whose stream
	// failed in an earlier attempt of the same backup.
	Skip []string
}

// Validate reports the first invalid option, naming it. Zero values are
// valid: they mean default (StallTimeout) or no limit (Timeout).
func (o Options) Validate() error {
	switch {
	case o.StallTimeout < 0:
		return fmt.Errorf("stall timeout %s: must not be negative", o.StallTimeout)
	case o.Timeout < 0:
		return fmt.Errorf("timeout %s: must not be negative", o.Timeout)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.StallTimeout <= 0 {
		o.StallTimeout = DefaultStallTimeout
	}
	if o.Chunk == 0 {
		o.Chunk = DefaultChunk
	}
	if o.Chunk < 0 {
		o.Chunk = 0
	}
	return o
}

// trailerError is an ErrTrailer with the details; it wraps the
// *verify.TrailerError.
type trailerError struct {
	msg string
	err error
}

func (e *trailerError) Error() string        { return e.msg }
func (e *trailerError) Is(target error) bool { return target == ErrTrailer }
func (e *trailerError) Unwrap() error        { return e.err }

// streamError marks an error returned by the snapshot stream itself (as
// opposed to the spool file or the tee), so callers can explain it.
type streamError struct{ err error }

func (e *streamError) Error() string { return "read snapshot stream: " + e.err.Error() }
func (e *streamError) Unwrap() error { return e.err }

// createSpool creates the spool file exclusively, 0600.
func createSpool(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	switch {
	case errors.Is(err, os.ErrExist):
		return nil, fmt.Errorf("create spool file %s: it already exists (another run may be in progress, or an interrupted one left it behind: remove it): %w", path, err)
	case err != nil:
		return nil, fmt.Errorf("create spool file %s (check --spool-dir): %w", path, err)
	}
	return f, nil
}

// discardSpool closes and removes a spool file after a failure.
func discardSpool(f *os.File) {
	_ = f.Close()           // the copy already failed; nothing to add
	_ = os.Remove(f.Name()) // best effort; a leftover is reported by the next O_EXCL create
}

// pipelineDepth is the number of copy buffers: one being filled from the
// stream while the others are hashed and written out. Memory stays at
// pipelineDepth*copyBufferSize whatever the snapshot size.
const pipelineDepth = 3

// save is Take's copy loop: it copies r, the raw snapshot stream of one
// etcd member, into the open spool file f, which it leaves open (not
// fsynced: see Take), and, byte for byte, into tee (nil for none), checking
// etcd's sha256 trailer as the bytes arrive. It returns the bytes read from
// r, also on error, so Take knows whether anything arrived, and the hex
// sha256 of the database. Memory use is constant.
//
// When no bytes arrive for opts.StallTimeout, or ctx ends, save closes r if
// it is an io.Closer to unblock the pending read and fails with ErrStalled
// or the context's error. A missing, short or mismatched trailer is
// ErrTrailer.
//
// Reading the stream and hashing and writing the bytes run in two
// goroutines, so the sha256 and the disk writes overlap with receiving.
func save(ctx context.Context, r io.Reader, f *os.File, tee io.Writer, opts Options) (int64, string, error) {
	if err := ctx.Err(); err != nil {
		return 0, "", err
	}
	wd := startWatchdog(ctx, r, opts.StallTimeout)
	defer wd.stop()

	free := make(chan []byte, pipelineDepth)
	for range pipelineDepth {
		free <- make([]byte, copyBufferSize)
	}
	full := make(chan []byte, pipelineDepth)
	s := &sink{h: verify.NewTrailerHash(), w: writeback.NewWriter(f, opts.Chunk), tee: tee, path: f.Name()}
	var wg sync.WaitGroup
	wg.Go(func() { s.run(full, free) })

	var n int64
	var rerr error
	for rerr == nil && !s.failed.Load() {
		buf := <-free
		var nr int
		nr, rerr = fill(r, buf, wd)
		n += int64(nr)
		if nr > 0 {
			full <- buf[:nr]
		} else {
			free <- buf
		}
	}
	close(full)
	wg.Wait()
	if s.err != nil {
		return n, "", s.err
	}
	if rerr == io.EOF && ctx.Err() != nil {
		// Canceled while the last buffers were written out: the caller
		// stopped waiting, so the snapshot does not count.
		return n, "", fmt.Errorf("stopped after %d bytes: %w", n, context.Cause(ctx))
	}
	if rerr != io.EOF {
		switch {
		case wd.stalled.Load():
			return n, "", fmt.Errorf("%w: no data for %s after %d bytes", ErrStalled, opts.StallTimeout, n)
		case ctx.Err() != nil:
			return n, "", fmt.Errorf("stopped after %d bytes: %w", n, context.Cause(ctx))
		}
		return n, "", &streamError{err: fmt.Errorf("after %d bytes: %w", n, rerr)}
	}
	sum, err := trailerCheck(s.h)
	if err != nil {
		return n, "", err
	}
	return n, sum, nil
}

// fill reads from r until buf is full or r fails (io.EOF included), telling
// the watchdog when it waits and when bytes arrive. Whole buffers mean few,
// large writes to the spool file.
func fill(r io.Reader, buf []byte, wd *watchdog) (int, error) {
	n := 0
	for n < len(buf) {
		wd.reading.Store(true)
		nr, err := r.Read(buf[n:])
		wd.reading.Store(false)
		if nr > 0 {
			wd.progress.Add(1)
			n += nr
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// sink hashes and writes out the buffers that save reads.
type sink struct {
	h    *verify.TrailerHash
	w    *writeback.Writer
	tee  io.Writer
	path string
	n    int64

	failed atomic.Bool
	err    error // set before failed; read after the sink goroutine ended
}

// run consumes full buffers until the channel is closed, returning each to
// free. After a failure it only returns buffers, so the reader never blocks.
func (s *sink) run(full <-chan []byte, free chan<- []byte) {
	for p := range full {
		if s.err == nil {
			s.err = s.write(p)
			if s.err != nil {
				s.failed.Store(true)
			}
		}
		free <- p[:cap(p)]
	}
}

func (s *sink) write(p []byte) error {
	s.h.Write(p)
	if _, err := s.w.Write(p); err != nil {
		return spoolWriteError(s.path, err)
	}
	s.n += int64(len(p))
	if s.tee != nil {
		if _, err := s.tee.Write(p); err != nil {
			return fmt.Errorf("write snapshot to output after %d bytes: %w", s.n, err)
		}
	}
	return nil
}

func spoolWriteError(path string, err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("write spool file %s: disk full (free space or point --spool-dir at a larger file system): %w", path, err)
	}
	return fmt.Errorf("write spool file %s: %w", path, err)
}

// trailerCheck checks the trailer of the stream h has seen and returns
// the hex sha256. Its errors are ErrTrailer (and, through the
// *verify.TrailerError they wrap, verify.ErrCorrupt) and say what to do.
func trailerCheck(h *verify.TrailerHash) (string, error) {
	sum, err := h.Check()
	var te *verify.TrailerError
	switch {
	case err == nil:
		return sum, nil
	case errors.As(err, &te) && te.Trailer != nil:
		return "", &trailerError{msg: fmt.Sprintf("trailer sha256 mismatch: got %x want %x; the stream was corrupted in transit, retry", te.Sum, te.Trailer), err: err}
	}
	return "", &trailerError{msg: fmt.Sprintf("trailer sha256 missing: the stream ended after %d bytes, which is not a database plus a 32-byte trailer; the stream was cut short, retry", h.Size()), err: err}
}

// watchdog cuts a stream that delivers nothing for the stall timeout, or
// whose context ends, by closing the reader.
type watchdog struct {
	progress atomic.Int64 // reads that returned data
	reading  atomic.Bool  // a Read is pending
	stalled  atomic.Bool
	done     chan struct{}
	wg       sync.WaitGroup
}

// startWatchdog watches reads of r. Only time spent waiting inside Read
// counts toward the stall: a slow disk or tee is not the stream's fault.
func startWatchdog(ctx context.Context, r io.Reader, stall time.Duration) *watchdog {
	wd := &watchdog{done: make(chan struct{})}
	closeReader := func() {
		if c, ok := r.(io.Closer); ok {
			_ = c.Close() // only to unblock the pending Read
		}
	}
	// Check four times per timeout: a stall is detected within 1.25x.
	const ticksPerTimeout = 4
	tick := max(stall/ticksPerTimeout, time.Millisecond)
	wd.wg.Go(func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last, idle := wd.progress.Load(), 0
		for {
			select {
			case <-wd.done:
				return
			case <-ctx.Done():
				closeReader()
				return
			case <-t.C:
			}
			p := wd.progress.Load()
			if p != last || !wd.reading.Load() {
				last, idle = p, 0
				continue
			}
			idle++
			if idle >= ticksPerTimeout {
				wd.stalled.Store(true)
				closeReader()
				return
			}
		}
	})
	return wd
}

// stop ends the watchdog and waits for it.
func (wd *watchdog) stop() {
	close(wd.done)
	wd.wg.Wait()
}
