package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/inspect"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// A SOURCE is a backup id, latest, latest-proven, or a point in time:
// @R (the state after revision R) or @T (after the last revision received
// at or before T: RFC 3339, or a duration ago such as 2h), which ls and
// get also take as --at-revision R / --at-time T.

// checkSource rejects a SOURCE that is none of these (exit 2).
func checkSource(ref string) error {
	_, _, err := parseSource(ref, time.Now())
	return err
}

// parseSource returns the point in time of a SOURCE (ok false for a
// backup).
func parseSource(ref string, now time.Time) (restore.Target, bool, error) {
	at, pit := strings.CutPrefix(ref, "@")
	if !pit {
		if ref != "latest" && ref != "latest-proven" && !repository.ValidID(ref) {
			return restore.Target{}, false, usagef("source %q is not a backup id (as lifeboat list shows), latest, latest-proven, @REVISION or @TIME", ref)
		}
		return restore.Target{}, false, nil
	}
	if r, err := strconv.ParseInt(at, 10, 64); err == nil {
		if r < 1 {
			return restore.Target{}, false, usagef("source %q: revisions start at 1", ref)
		}
		return restore.Target{Revision: r}, true, nil
	}
	t, err := parseTime("source", at, now)
	if err != nil {
		return restore.Target{}, false, usagef("source %q: after @ give a revision (@1234) or %s", ref, timeForms)
	}
	return restore.Target{Time: t}, true, nil
}

// atSource turns --at-revision / --at-time into a SOURCE ("" when
// neither is given).
func atSource(rev int64, at string) (string, error) {
	switch {
	case rev != 0 && at != "":
		return "", usagef("--at-revision and --at-time are mutually exclusive: give one")
	case rev < 0:
		return "", usagef("--at-revision %d: revisions start at 1", rev)
	case rev > 0:
		return "@" + strconv.FormatInt(rev, 10), nil
	case at != "":
		return "@" + at, nil
	}
	return "", nil
}

// cacheDir is inspect.cache_dir, or lifeboat/ under the user's cache dir.
func cacheDir(cfg *Config) (string, error) {
	if cfg.Inspect.CacheDir != "" {
		return cfg.Inspect.CacheDir, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", &ConfigError{Key: "inspect.cache_dir", Err: fmt.Errorf("no user cache dir (%w): set --cache-dir", err)}
	}
	return filepath.Join(d, "lifeboat"), nil
}

// inspector opens sources from one store and cache, with one set of keys.
type inspector struct {
	repo   *repository.Repo
	cache  *inspect.Cache
	cfg    *Config
	lg     *slog.Logger
	stderr io.Writer
	enc    *inspect.Keys
}

func newInspector(ctx context.Context, a *app, cfg *Config, lg *slog.Logger) (*inspector, error) {
	dir, err := cacheDir(cfg)
	if err != nil {
		return nil, err
	}
	var enc *inspect.Keys
	if cfg.Inspect.EncryptionConfig != "" {
		if enc, err = inspect.LoadEncryptionConfig(cfg.Inspect.EncryptionConfig); err != nil {
			return nil, &ConfigError{Key: "inspect.encryption_config", Err: err}
		}
	}
	repo, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	return &inspector{repo: repo, cache: &inspect.Cache{Dir: dir, MaxBytes: cfg.Inspect.CacheMaxSize},
		cfg: cfg, lg: lg, stderr: a.stderr, enc: enc}, nil
}

// openSource opens the one SOURCE of a command (ls, get): an inspector
// for cfg, then the snapshot ref names. Close it when done.
func openSource(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, ref string) (*inspect.Snapshot, error) {
	in, err := newInspector(ctx, a, cfg, lg)
	if err != nil {
		return nil, err
	}
	return in.open(ctx, ref)
}

// open resolves ref and opens its snapshot from the cache, fetching it
// (or, for a point in time, building it) on first use.
func (in *inspector) open(ctx context.Context, ref string) (*inspect.Snapshot, error) {
	target, pit, err := parseSource(ref, time.Now())
	if err != nil {
		return nil, err
	}
	if pit {
		return in.openPointInTime(ctx, target)
	}
	m, err := selectBackup(ctx, in.repo, ref, "", time.Now())
	if err != nil {
		return nil, err
	}
	ids, err := identities(in.cfg)
	if err != nil {
		return nil, err
	}
	s, err := in.openBackup(ctx, m, ids)
	if err != nil {
		return nil, err
	}
	s.SetEncryptionKeys(in.enc)
	return s, nil
}

// openBackup opens backup m from the cache, fetching it on first use.
func (in *inspector) openBackup(ctx context.Context, m *repository.Manifest, ids []age.Identity) (*inspect.Snapshot, error) {
	s, st, err := in.cache.Open(ctx, in.repo, m, ids, in.lg)
	if err != nil {
		return nil, err
	}
	if st.Fetched {
		fmt.Fprintf(in.stderr, "backup %s (revision %d): fetched, checked against its manifest and indexed into %s in %s\n",
			m.ID, m.Revision, in.cache.Dir, (st.Fetch + st.Index).Round(time.Millisecond))
	}
	return s, nil
}

// openPointInTime opens the state at target: the nearest snapshot of the
// window that holds it (from the cache) with the captured changes up to
// it replayed onto a copy, built once into the cache under the
// generation and the revision.
func (in *inspector) openPointInTime(ctx context.Context, target restore.Target) (*inspect.Snapshot, error) {
	ids, err := identities(in.cfg)
	if err != nil {
		return nil, err
	}
	l, err := in.repo.List(ctx)
	if err != nil {
		return nil, err
	}
	plan, err := restore.PlanPointInTime(ctx, in.repo, l, target, ids)
	if err != nil {
		return nil, err
	}
	liftMemoryLimit()
	name := fmt.Sprintf("%s@r%d", plan.Window.Generation, plan.Revision)
	var replayed restore.ReplayStats
	s, st, err := in.cache.OpenBuilt(ctx, in.repo.Cluster, name, func(ctx context.Context, path string) (int64, error) {
		base, err := in.openBackup(ctx, plan.Snapshot, ids)
		if err != nil {
			return 0, err
		}
		err = copyFile(base.Path(), path)
		base.Close()
		if err != nil {
			return 0, err
		}
		if replayed, err = restore.Replay(ctx, path, plan, in.repo, ids, in.lg); err != nil {
			return 0, fmt.Errorf("replay the changes onto backup %s: %w", plan.Snapshot.ID, err)
		}
		return plan.Revision, nil
	}, in.lg)
	if err != nil {
		return nil, err
	}
	if st.Fetched {
		fmt.Fprintf(in.stderr, "revision %d: backup %s (revision %d) with %d captured revisions replayed, cached in %s in %s\n",
			plan.Revision, plan.Snapshot.ID, plan.Snapshot.Revision, replayed.Revisions, in.cache.Dir, (st.Fetch + st.Index).Round(time.Millisecond))
	}
	s.SetEncryptionKeys(in.enc)
	return s, nil
}

func copyFile(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyBuffer(dst, src, make([]byte, 1<<20)); err != nil {
		dst.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	if err := dst.Sync(); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// damaged reports whether err is proven damage of a stored backup: its
// object does not match its manifest, or the snapshot in it is corrupt.
func damaged(err error) bool {
	return errors.Is(err, repository.ErrObjectMismatch) || errors.Is(err, verify.ErrCorrupt) || errors.Is(err, verify.ErrManifestMismatch)
}

// withPrevious adds to the error of a damaged latest (ref) the way out:
// the trusted backup before it, and latest-proven.
func withPrevious(ctx context.Context, b *repository.Repo, ref string, m *repository.Manifest, err error) error {
	if err == nil || ref != "latest" || m == nil || !damaged(err) {
		return err
	}
	c, cerr := b.Candidates(ctx)
	if cerr != nil {
		return err
	}
	for i, x := range c {
		if x.ID == m.ID && i+1 < len(c) {
			return fmt.Errorf("%w\nthe backup before it is %s: give that id instead of latest, or latest-proven for the newest one a drill proved (lifeboat list shows them)", err, c[i+1].ID)
		}
	}
	return fmt.Errorf("%w\nno older backup of this cluster is listed; latest-proven names the newest one a drill proved, if any", err)
}
