package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// runCapture drives capture.Run in this process against an S3 store,
// serving the capture gauges the agent exports (lag, revision, up) and the
// job's buffered bytes on --listen: a harness check next to `lifeboat
// agent --capture`, whose figures are the ones recorded.
func runCapture(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("capture", flag.ExitOnError)
	ep := fs.String("endpoints", "http://127.0.0.1:2379", "etcd endpoint")
	store := fs.String("store", "", "s3://bucket/prefix")
	s3ep := fs.String("s3-endpoint", "", "S3 endpoint")
	recipient := fs.String("recipient", "", "age recipient (age1…)")
	interval := fs.Duration("interval", capture.DefaultInterval, "capture.interval")
	spool := fs.String("spool-dir", os.TempDir(), "spool directory of the anchor snapshot")
	listen := fs.String("listen", "127.0.0.1:9469", "metrics address")
	fs.Parse(args)
	bucket, prefix, _ := strings.Cut(strings.TrimPrefix(*store, "s3://"), "/")
	lg := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	st, err := uploader.NewS3(ctx, uploader.S3Config{Bucket: bucket, Prefix: prefix, Endpoint: *s3ep, PathStyle: true, CreateBucket: true}, lg)
	if err != nil {
		return err
	}
	repo := repository.New(st, "default")
	enc := repository.Encoding{Compression: "zstd"}
	if *recipient != "" {
		rs, keys, err := repository.ParseRecipients([]string{*recipient}, nil)
		if err != nil {
			return err
		}
		enc.Recipients, enc.RecipientKeys = rs, keys
	}
	cfg := snapshot.Config{Endpoints: []string{*ep}, DialTimeout: 5 * time.Second}
	sess, err := snapshot.Dial(ctx, cfg, lg)
	if err != nil {
		return err
	}
	defer sess.Close()
	var (
		mu     sync.Mutex
		status capture.Status
		stats  capture.Stats
	)
	start := time.Now()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		s := status
		mu.Unlock()
		from := s.RecoveryPoint
		if from.IsZero() {
			from = start
		}
		up := 0
		if s.Running {
			up = 1
		}
		fmt.Fprintf(w, "lifeboat_capture_up %d\nlifeboat_capture_revision %d\nlifeboat_capture_lag_seconds %g\n", up, s.Revision, time.Since(from).Seconds())
		fmt.Fprintf(w, "lifeboat_capture_buffered_bytes %d\nlifeboat_capture_buffered_bytes_peak %d\n", stats.BufferedBytes.Load(), stats.PeakBufferedBytes.Load())
	})
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	job := capture.Job{
		Session: sess, Repo: repo, Encoding: enc, Interval: *interval,
		Token: func() (int64, bool) { return start.UnixNano(), true },
		Snapshot: func(ctx context.Context) (*repository.Manifest, error) {
			return backup.Run(ctx, backup.Job{Etcd: cfg, SpoolDir: *spool, Backups: repo, Encoding: enc, Version: "benchtool"}, lg)
		},
		Report: func(s capture.Status) { mu.Lock(); status = s; mu.Unlock() },
		Stats:  &stats,
	}
	if err := capture.Run(ctx, job, lg); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
