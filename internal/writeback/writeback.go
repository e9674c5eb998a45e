package writeback

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
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

// FileOptions tune WriteFileAtomic.
type FileOptions struct {
	// Perm is the file's mode; zero means 0600.
	Perm os.FileMode
	// NoReplace refuses to replace an existing file at path: the write
	// then fails with an error wrapping fs.ErrExist, before fn runs when
	// path exists already, and at the end when it appeared meanwhile (the
	// hard link that commits the file decides a race, so the file system
	// must support hard links). Without it an existing file is replaced.
	NoReplace bool
	// TempPrefix starts the name of the temporary file, which a random
	// suffix completes; empty means "." + the file's name + ".tmp-". A
	// caller that lists the directory skips temporary files by it.
	TempPrefix string
	// Chunk is the incremental writeback chunk (see Writer): zero means
	// DefaultChunk, negative disables it.
	Chunk int64
}

// WriteFileAtomic writes the file at path so that it appears whole or not at
// all: fn writes the content to a temporary file in the same directory
// (created 0600, then given o.Perm), which is fsynced and renamed over path
// (or, with o.NoReplace, hard-linked to path), and the directory fsynced
// (CommitFile). If fn or any step fails, the temporary file is removed and
// an existing file at path is left untouched. The directory must exist.
func WriteFileAtomic(path string, o FileOptions, fn func(w io.Writer) error) (err error) {
	if o.NoReplace {
		// Fail fast, before writing what the link would refuse.
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("create %s: %w", path, fs.ErrExist)
		}
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	prefix := o.TempPrefix
	if prefix == "" {
		prefix = "." + base + ".tmp-"
	}
	f, err := os.CreateTemp(dir, prefix+"*")
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
	perm := o.Perm
	if perm == 0 {
		perm = 0o600
	}
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("chmod %s: %w", tmp, err)
	}
	chunk := o.Chunk
	switch {
	case chunk == 0:
		chunk = DefaultChunk
	case chunk < 0:
		chunk = 0
	}
	w := NewWriter(f, chunk)
	if err := fn(w); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := w.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	return commit(tmp, path, o.NoReplace)
}

// CommitFile makes tmp, a complete file written by the caller, appear at
// path in one step: it fsyncs tmp, renames it over path (with noReplace:
// hard-links it to path, failing with an error wrapping fs.ErrExist when
// path exists, and removes tmp) and fsyncs the directory. tmp must be in
// path's directory (on the same file system). On failure before the
// commit, tmp is left for the caller to remove.
func CommitFile(tmp, path string, noReplace bool) error {
	f, err := os.Open(tmp)
	if err != nil {
		return fmt.Errorf("open %s: %w", tmp, err)
	}
	serr := f.Sync()
	cerr := f.Close()
	if serr != nil {
		return fmt.Errorf("fsync %s: %w", tmp, serr)
	}
	if cerr != nil {
		return fmt.Errorf("close %s: %w", tmp, cerr)
	}
	return commit(tmp, path, noReplace)
}

// commit renames or links the fsynced file tmp to path and fsyncs the
// directory.
func commit(tmp, path string, noReplace bool) error {
	if !noReplace {
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("rename %s to %s: %w", tmp, path, err)
		}
		return SyncDir(filepath.Dir(path))
	}
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create %s: it appeared meanwhile: %w", path, fs.ErrExist)
		}
		return fmt.Errorf("link %s to %s (the directory must be on a file system with hard links): %w", tmp, path, err)
	}
	// The file is committed; a temporary name that cannot be removed
	// harms nothing (callers skip it by its prefix).
	_ = os.Remove(tmp)
	return SyncDir(filepath.Dir(path))
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
