package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/lifeboat-dev/lifeboat/inspect"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// checkSource rejects a SOURCE that is not a backup id, latest or
// latest-proven (exit 2).
func checkSource(ref string) error {
	if ref != "latest" && ref != "latest-proven" && !repository.ValidID(ref) {
		return usagef("source %q is not a backup id (as lifeboat list shows), latest or latest-proven", ref)
	}
	return nil
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

// open resolves ref and opens its snapshot from the cache, fetching it
// on first use.
func (in *inspector) open(ctx context.Context, ref string) (*inspect.Snapshot, error) {
	m, err := selectBackup(ctx, in.repo, ref, "", time.Now())
	if err != nil {
		return nil, err
	}
	ids, err := identities(in.cfg)
	if err != nil {
		return nil, err
	}
	s, st, err := in.cache.Open(ctx, in.repo, m, ids, in.lg)
	if err != nil {
		return nil, err
	}
	if st.Fetched {
		fmt.Fprintf(in.stderr, "backup %s (revision %d): fetched, checked against its manifest and indexed into %s in %s\n",
			m.ID, m.Revision, in.cache.Dir, (st.Fetch + st.Index).Round(time.Millisecond))
	}
	s.SetEncryptionKeys(in.enc)
	return s, nil
}
