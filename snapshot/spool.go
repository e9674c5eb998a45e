package snapshot

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CreateSpool creates a spool file in dir (0600) that has no name in dir
// (Linux: O_TMPFILE; elsewhere, or on file systems without it, a file
// unlinked right after it was created): however the process ends, even by
// SIGKILL or the OOM killer, the kernel frees the file and nothing is left
// behind in dir. The file lives as long as it is open; other readers in
// this process open it by SpoolPath. The caller closes it.
func CreateSpool(dir string) (*os.File, error) {
	f, err := createAnonymous(dir)
	if err != nil {
		return nil, fmt.Errorf("create spool file in %s (check --spool-dir): %w", dir, err)
	}
	return f, nil
}

// createUnlinked creates a file in dir and unlinks it at once. Only a
// process killed between the two calls can leave it (empty) behind.
func createUnlinked(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".lifeboat-spool-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}

// LeftoverAge is how long a spool leftover must have been untouched
// before SweepSpool removes it. A snapshot in progress writes its spool
// file continuously (and a stalled stream is stopped after its stall
// timeout, minutes at most), so an older lifeboat still snapshotting into
// the same directory never loses its file.
const LeftoverAge = time.Hour

// SweepSpool removes what earlier lifeboat versions could leave in the
// spool dir: named spool files (lifeboat-*.db.part, before spool files
// had no name) and fallback files killed between their creation and
// their unlink (.lifeboat-spool-*), once untouched for LeftoverAge. Other
// files are never touched. It returns the names removed.
func SweepSpool(dir string, now time.Time) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("sweep spool dir %s: %w", dir, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		legacy := strings.HasPrefix(name, "lifeboat-") && strings.HasSuffix(name, ".db.part")
		if !legacy && !strings.HasPrefix(name, ".lifeboat-spool-") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) < LeftoverAge {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("sweep spool dir %s: %w", dir, err)
	}
	return removed, nil
}
