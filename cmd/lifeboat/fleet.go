package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/fleet"
	"github.com/lifeboat-dev/lifeboat/internal/logfield"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

type fleetStatusOptions struct {
	output   string
	problems bool
	// full: list every object, no cluster read through its index.
	full bool
	// storeOnly: --store was given, which shows that store alone.
	storeOnly bool
}

func newFleetCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "fleet",
		Short: "Every cluster of one or more stores, judged by its own schedules",
		Args:  cobra.NoArgs,
	}
	c.AddCommand(newFleetStatusCmd(a), newFleetServeCmd(a))
	return c
}

type fleetServeOptions struct {
	listen    string
	interval  time.Duration
	storeOnly bool
}

func newFleetServeCmd(a *app) *cobra.Command {
	var o fleetServeOptions
	c := &cobra.Command{
		Use:   "serve",
		Short: "The fleet hub: read the stores every --interval, serve /metrics, /api/v1/clusters and a status page",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			o.storeOnly = cmd.Flags().Changed("store")
			return runFleetServe(cmd.Context(), cfg, a.logger(cfg), o, nil)
		},
	}
	c.Flags().StringVar(&o.listen, "listen", "127.0.0.1:9470", "HTTP address of the status page, /api/v1/clusters and /metrics")
	c.Flags().DurationVar(&o.interval, "interval", time.Minute, "time between two reads of the stores")
	return c
}

// runFleetServe serves the hub until ctx ends; ready, when not nil,
// receives the listener's address once it is bound.
func runFleetServe(ctx context.Context, cfg *Config, lg *slog.Logger, o fleetServeOptions, ready chan<- string) error {
	fleetGC()
	if o.interval < time.Second {
		return usageError{fmt.Errorf("--interval %s: must be at least 1s", o.interval)}
	}
	sources, err := fleetSources(ctx, cfg, o.storeOnly, lg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("fleet serve: listen on %s: %w", o.listen, err)
	}
	drills, err := fleetDrills(cfg, lg)
	if err != nil {
		return err
	}
	fullEvery := cfg.Fleet.FullEvery
	if fullEvery == 0 {
		fullEvery = o.interval // every refresh
	}
	reader, cleanup := fleetServeReader(cfg, lg)
	defer cleanup()
	hub := fleet.NewHub(fleet.HubConfig{Sources: sources, Interval: o.interval, FullEvery: fullEvery, Reader: reader, Drills: drills}, lg)
	srv := &http.Server{Handler: hub.Handler(), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(lg.Handler(), slog.LevelWarn)}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			lg.Error("http server stopped", "err", err)
		}
	})
	lg.Info("fleet hub serving / /api/v1/clusters /metrics", "addr", ln.Addr().String(), "stores", len(sources), "interval_seconds", logfield.Seconds(o.interval))
	if ready != nil {
		ready <- ln.Addr().String()
	}
	err = hub.Run(ctx)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	srv.Shutdown(sctx)
	wg.Wait()
	return err
}

func newFleetStatusCmd(a *app) *cobra.Command {
	var o fleetStatusOptions
	c := &cobra.Command{
		Use:   "status",
		Short: "One row per cluster: newest backup, next due, recovery point, drill, agent, problems; exit 1 on any problem",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			o.storeOnly = cmd.Flags().Changed("store")
			return runFleetStatus(cmd.Context(), cfg, a.logger(cfg), o, a.stdout, time.Now())
		},
	}
	addOutputFlag(c, &o.output, "table or json")
	c.Flags().BoolVar(&o.problems, "problems", false, "show only the clusters with a problem")
	c.Flags().BoolVar(&o.full, "full", false, "list every object and read every document instead of reading each cluster through its agent's index")
	return c
}

// fleetGCPercent lets the fleet's heap grow further between
// collections: its live heap is small (8–18 MB at 200 clusters) and its
// garbage is each cluster's documents as read, so at GOGC 100 the
// collector ran about 110 times in one cold read of 200 clusters; at 400
// the read took 2.25 s instead of 2.6–3.3 s and the hub's first refresh
// 2.28 s instead of 2.7–3.2 s, at the same peak RSS (65 MiB:
// docs/benchmarks.md). The soft memory limit still bounds the heap.
const fleetGCPercent = 400

// fleetGC sets fleetGCPercent unless GOGC says otherwise.
func fleetGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(fleetGCPercent)
	}
}

// errFleetProblems is returned when a cluster has a problem (exit 1).
var errFleetProblems = errors.New("clusters with problems")

// runFleetStatus reads every cluster of the fleet's stores and prints
// the report; it fails when any cluster has a problem.
func runFleetStatus(ctx context.Context, cfg *Config, lg *slog.Logger, o fleetStatusOptions, out io.Writer, now time.Time) error {
	fleetGC()
	sources, err := fleetSources(ctx, cfg, o.storeOnly, lg)
	if err != nil {
		return err
	}
	reader := fleetReader(cfg, lg)
	reader.NoIndex, reader.ForgetDocs = o.full, true // one read: nothing kept for a next
	cs, err := reader.Read(ctx, sources, lg)
	if err != nil {
		return err
	}
	r := fleet.NewReport(cs, fleet.DefaultPolicy(), now)
	shown := r
	if o.problems {
		shown = r.WithProblems()
	}
	if o.output == "json" {
		err = shown.WriteJSON(out)
	} else {
		err = shown.WriteTable(out)
	}
	if err != nil {
		return err
	}
	if n := r.Problems(); n > 0 {
		return fmt.Errorf("%d of %d %w", n, len(r.Clusters), errFleetProblems)
	}
	return nil
}

// fleetDrills is the hub's drill runner (nil when fleet.drills.enabled
// is off).
func fleetDrills(cfg *Config, lg *slog.Logger) (*fleet.Drills, error) {
	dc := cfg.Fleet.Drills
	if !dc.Enabled {
		return nil, nil
	}
	ids, err := fleetIdentities(dc.Identities)
	if err != nil {
		return nil, &ConfigError{Key: "fleet.drills.identities", Err: err}
	}
	key, _, err := signingFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	d, err := fleet.NewDrills(fleet.DrillConfig{Signer: key, Schedule: dc.Schedule, Concurrency: dc.Concurrency, Identities: ids,
		ScratchDir: cfg.Drill.ScratchDir, Timeout: cfg.Drill.Timeout, EtcdBinary: cfg.Drill.EtcdBinary, Version: Version}, fleet.DefaultPolicy(), lg)
	if err != nil {
		return nil, &ConfigError{Key: "fleet.drills", Err: err}
	}
	return d, nil
}

// fleetIdentities returns the identities of each cluster from path: one
// identity file for all, or a directory with a file per cluster, named
// as the cluster (read at each drill: a key added later is found).
func fleetIdentities(path string) (func(cluster string) ([]age.Identity, error), error) {
	if path == "" {
		return nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		ids, err := repository.ParseIdentityFile(path)
		if err != nil {
			return nil, err
		}
		return func(string) ([]age.Identity, error) { return ids, nil }, nil
	}
	return func(cluster string) ([]age.Identity, error) {
		if cluster == "" || strings.ContainsAny(cluster, `/\`) || cluster == "." || cluster == ".." {
			return nil, fmt.Errorf("no identity file for cluster %q", cluster)
		}
		file := filepath.Join(path, cluster)
		if _, err := os.Stat(file); errors.Is(err, os.ErrNotExist) {
			return nil, nil // unencrypted backups need none
		}
		return repository.ParseIdentityFile(file)
	}, nil
}

// fleetReader is a fleet.Reader keeping its documents in
// fleet.cache_dir when set; a cache that cannot be used is logged and
// the stores are read cold.
func fleetReader(cfg *Config, lg *slog.Logger) *fleet.Reader {
	if cfg.Fleet.CacheDir == "" {
		return fleet.NewReader()
	}
	r, err := fleet.NewCachedReader(cfg.Fleet.CacheDir)
	if err != nil {
		lg.Warn("the fleet cache cannot be used: reading the stores cold, the cache is rewritten", "err", err)
	}
	return r
}

// fleetServeReader is the hub's Reader: fleetReader's with
// fleet.cache_dir; without, one keeping its documents in a private
// temporary directory for this run (0700, removed by cleanup), so that
// the hub's memory holds the clusters being read, not every document of
// the fleet. Where no such directory can be made, in memory.
func fleetServeReader(cfg *Config, lg *slog.Logger) (r *fleet.Reader, cleanup func()) {
	if cfg.Fleet.CacheDir != "" {
		return fleetReader(cfg, lg), func() {}
	}
	dir, err := os.MkdirTemp("", "lifeboat-fleet-cache-")
	if err != nil {
		lg.Warn("no fleet.cache_dir and no temporary directory: the hub keeps every document in memory", "err", err)
		return fleet.NewReader(), func() {}
	}
	remove := func() {
		if err := os.RemoveAll(dir); err != nil {
			lg.Warn("cannot remove the hub's temporary document cache", "dir", dir, "err", err)
		}
	}
	r, err = fleet.NewCachedReader(dir)
	if err != nil { // a new directory: cannot happen but for the disk
		lg.Warn("the hub's temporary document cache cannot be used: in memory", "err", err)
		remove()
		return fleet.NewReader(), func() {}
	}
	lg.Info("no fleet.cache_dir: the hub keeps its documents in a temporary directory until it stops", "dir", dir)
	return r, remove
}

// fleetSources opens the fleet's stores, read-only: fleet.stores, or
// store.url when that list is empty or --store was given. Every store
// is read with the configured trust.
func fleetSources(ctx context.Context, cfg *Config, storeOnly bool, lg *slog.Logger) ([]fleet.Source, error) {
	urls := cfg.Fleet.Stores
	key := "fleet.stores"
	if storeOnly || len(urls) == 0 {
		urls, key = []string{cfg.Store.URL}, "store.url"
	}
	_, trust, err := signingFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	var out []fleet.Source
	for _, raw := range urls {
		u, err := uploader.ParseStoreURL(raw)
		if err != nil {
			return nil, &ConfigError{Key: key, Err: err}
		}
		var st uploader.Store
		switch u.Scheme {
		case "file":
			// NewDir creates a missing directory: the fleet never writes.
			if _, err := os.Stat(u.Dir); err != nil {
				return nil, &ConfigError{Key: key, Err: fmt.Errorf("store directory %s: %w (the fleet reads stores, it creates none)", u.Dir, err)}
			}
			st, err = uploader.NewDir(u.Dir)
		case "s3":
			sc := s3Config(u, cfg.Store.S3)
			sc.CreateBucket = false // the fleet never writes
			st, err = uploader.NewS3(ctx, sc, lg)
		default:
			return nil, cfgErr(key, "%s stores are not supported by this build", u.Scheme)
		}
		if err != nil {
			return nil, fmt.Errorf("open %s: %w", raw, err)
		}
		out = append(out, fleet.Source{Name: st.String(), Store: st, Trust: trust})
	}
	return out, nil
}
