package writeback

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// How Shrink frees a large file: ShrinkStep bytes per truncate, with
// ShrinkPause between truncates. Measured on this project's machine (ext4
// mounted with discard), a 4 KiB write+fdatasync loop every 5 ms while a
// 400 MB file is freed: at once, its slowest sync took 44–64 ms (idle:
// 7.6 ms); in 32 MiB steps 5 ms apart 10.6–11.3 ms, in 16 MiB steps
// 6.1–10.1 ms; the file was gone in 0.11, 0.19 and 0.26 s.
const (
	ShrinkStep  = 32 << 20
	ShrinkPause = 5 * time.Millisecond
)

// truncate is os.File.Truncate; tests record the steps through it.
var truncate = (*os.File).Truncate

// Shrink truncates f to zero size in steps of ShrinkStep bytes, pausing
// ShrinkPause between them, so that the file system frees its blocks a
// little at a time. ext4 frees (and, mounted with discard, trims) a file's
// blocks inside a journal commit, and every other fsync on the disk waits
// for that commit: freeing a spool of 400 MB at once stalled the etcd
// leader's WAL writes on the same disk for 60–90 ms, the largest put
// latency of every backup (docs/benchmarks.md). This is RocksDB's
// bytes_max_delete_chunk idea.
//
// Shrink is for files only this process uses (a spool file, a scratch
// copy): a reader elsewhere would see the file shrink under it, where
// after a plain unlink it could read on. A file with more than one name
// (a hard link elsewhere) is left whole. It leaves f open.
func Shrink(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("shrink %s: %w", f.Name(), err)
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink > 1 {
		return nil
	}
	for size := fi.Size(); size > ShrinkStep; {
		size -= ShrinkStep
		if err := truncate(f, size); err != nil {
			return fmt.Errorf("shrink %s: %w", f.Name(), err)
		}
		time.Sleep(ShrinkPause)
	}
	if err := truncate(f, 0); err != nil {
		return fmt.Errorf("shrink %s: %w", f.Name(), err)
	}
	return nil
}

// Remove removes the file at path like os.Remove, first shrinking it
// (Shrink) when it is a regular file larger than one step with no other
// link: a hard link elsewhere keeps its content, and a symbolic link is
// removed, never followed. A file that is gone already is not an error.
func Remove(path string) error {
	if err := shrinkPath(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// RemoveAll is os.RemoveAll with every large regular file of one link
// inside dir shrunk first (Remove's rules; symbolic links are not
// followed). dir itself may be a file.
func RemoveAll(dir string) error {
	var errs []error
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // os.RemoveAll below reports what it cannot remove
		}
		if d.Type().IsRegular() {
			if err := shrinkPath(path); err != nil {
				errs = append(errs, err)
			}
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// shrinkPath shrinks the regular file at path (not following a symbolic
// link) when it is larger than one step and has no other hard link.
func shrinkPath(path string) error {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() <= ShrinkStep {
		return nil // os.Remove reports a path it cannot remove
	}
	f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil // not ours to write: removed in one go
	}
	defer f.Close()
	if fi2, err := f.Stat(); err != nil || !os.SameFile(fi, fi2) {
		return nil // replaced in between: leave it to os.Remove
	}
	return Shrink(f)
}
