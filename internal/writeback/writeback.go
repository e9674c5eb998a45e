package writeback

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// DefaultChunk is the writeback chunk used by WriteFileAtomic and suggested for
// large files: big enough that the syscalls cost nothing measurable, small
// enough that the page cache never holds much dirty data for the file.
const DefaultChunk = 8 << 20

// Writer wraps an *os.File and, every Chunk bytes written, starts asynchronous
// writeback of that range (sync_file_range SYNC_FILE_RANGE_WRITE) and waits for
// the range before the previous one (SYNC_FILE_RANGE_WAIT_BEFORE|WRITE|
// WAIT_AFTER), so dirty pages stay bounded (about three chunks) and the final
// fsync is small. A chunk of 0 disables it
// (plain writes). Where sync_file_range is unsupported (other systems, some
// file systems) Writer silently falls back to plain writes.
//
// Writer assumes it is the only writer of the file and that writes are
// sequential from the file offset at the time NewWriter was called. It is not
// safe for concurrent use. It does not close the file.
type Writer struct {
	f     *os.File
	chunk int64
	off   int64 // file offset after the last write
	// started is the end of the last range whose writeback was started.
	// Everything before waited has been written out and waited for; the
	// ranges [waited, started) are in flight (at most two chunks).
	started int64
	waited  int64
}

// NewWriter returns a Writer that writes to f with incremental writeback every
// chunk bytes (0 disables it).
func NewWriter(f *os.File, chunk int64) *Writer {
	w := &Writer{f: f, chunk: chunk}
	if chunk <= 0 {
		w.chunk = 0
		return w
	}
	off, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		// Not seekable (a pipe): writeback ranges make no sense.
		w.chunk = 0
		return w
	}
	w.off, w.started, w.waited = off, off, off
	return w
}

// Write writes p to the file and, for every complete chunk, starts its
// writeback and waits for the one before it.
func (w *Writer) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	w.off += int64(n)
	if err != nil {
		return n, err
	}
	for w.chunk > 0 && w.off-w.started >= w.chunk {
		if err := w.flushChunk(); err != nil {
			return n, fmt.Errorf("writeback %s: %w", w.f.Name(), err)
		}
	}
	return n, nil
}

// flushChunk starts writeback of the chunk [started, started+chunk) and
// waits for the chunk before the previous one, so that two chunks are in
// flight while the next one fills: the disk stays busy, the writer never
// runs more than about three chunks ahead of it.
func (w *Writer) flushChunk() error {
	start := w.started
	ok, err := startWriteback(w.f, start, w.chunk)
	if err != nil {
		return err
	}
	if !ok {
		w.chunk = 0 // unsupported here: plain writes from now on
		return nil
	}
	w.started = start + w.chunk
	if start-w.waited > w.chunk {
		end := start - w.chunk
		if _, err := waitWriteback(w.f, w.waited, end-w.waited); err != nil {
			return err
		}
		w.waited = end
	}
	return nil
}

// Sync flushes the file to stable storage (fsync).
func (w *Writer) Sync() error {
	if err := w.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", w.f.Name(), err)
	}
	return nil
}

// WriteFileAtomic writes the file at path so that it appears whole or not at
// all: fn writes the content to a temporary file in the same directory
// (created 0600, then given perm), which is fsynced, renamed over path, and
// the directory fsynced. If fn or any step fails, the temporary file is
// removed and an existing file at path is left untouched.
func WriteFileAtomic(path string, perm os.FileMode, fn func(w io.Writer) error) (err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close() // already failing; the close error adds nothing
			_ = os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	w := NewWriter(f, DefaultChunk)
	if err := fn(w); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
	}
	return SyncDir(dir)
}

// SyncDir fsyncs a directory so that a rename or create inside it survives a
// crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory %s: %w", dir, err)
	}
	if err := d.Sync(); err != nil {
		_ = d.Close()
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	if err := d.Close(); err != nil {
		return fmt.Errorf("close directory %s: %w", dir, err)
	}
	return nil
}
