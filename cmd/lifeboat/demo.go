package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/restore"
)

type demoOptions struct {
	objects int
}

func newDemoCmd(a *app) *cobra.Command {
	var o demoOptions
	c := &cobra.Command{
		Use:   "demo",
		Short: "Self-contained tour: embedded etcd with Kubernetes-like data, one verified and drilled backup into ./lifeboat-demo",
		Long: `demo starts an embedded etcd in a temporary directory, seeds it with
Kubernetes-like keys, takes a verified backup into ./lifeboat-demo (or
--store), lists and verifies it, drills it (restores it into a scratch dir,
boots a throwaway etcd on it and checks it), then stops etcd and removes the
temporary directory. It needs nothing but this binary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.objects < 1 {
				return usagef("--objects must be at least 1")
			}
			return runDemo(cmd.Context(), a, cmd.Flags(), o)
		},
	}
	c.Flags().IntVar(&o.objects, "objects", 5000, "Kubernetes-like objects to seed")
	return c
}

func runDemo(ctx context.Context, a *app, flags *pflag.FlagSet, o demoOptions) error {
	out := a.stdout
	tmp, err := os.MkdirTemp("", "lifeboat-demo-")
	if err != nil {
		return fmt.Errorf("demo: temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)

	// The demo runs on embedded defaults: only the store and logging
	// can be chosen, the etcd side is its own.
	if !flags.Changed("store") && a.getenv("LIFEBOAT_STORE_URL") == "" {
		abs, err := filepath.Abs("lifeboat-demo")
		if err != nil {
			return err
		}
		if err := flags.Set("store", "file://"+abs); err != nil {
			return err
		}
	}
	if !flags.Changed("log-level") && a.getenv("LIFEBOAT_LOG_LEVEL") == "" {
		_ = flags.Set("log-level", "warn")
	}
	cfg, err := a.uploadConfig()
	if err != nil {
		return err
	}
	lg := a.logger(cfg)

	fmt.Fprintf(out, "1/6 starting an embedded etcd in %s\n", tmp)
	srv, err := restore.StartEtcd(ctx, restore.EtcdOptions{DataDir: filepath.Join(tmp, "etcd"), Name: "demo"})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer srv.Close()
	cfg.Etcd = EtcdConfig{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Member: "any"}
	cfg.Snapshot.SpoolDir = filepath.Join(tmp, "spool")
	cfg.Drill.ScratchDir = filepath.Join(tmp, "scratch")
	cfg.Drill.CheckPrefixes = []string{"/registry/namespaces/"}

	fmt.Fprintf(out, "2/6 seeding %d Kubernetes-like objects (/registry/...)\n", o.objects)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: nil})
	if err != nil {
		return fmt.Errorf("demo: connect to embedded etcd: %w", err)
	}
	res, err := seed.Kubernetes(ctx, cli, seed.Options{Objects: o.objects, Compact: true, Seed: 1})
	cli.Close()
	if err != nil {
		return fmt.Errorf("demo: seed: %w", err)
	}
	fmt.Fprintf(out, "    %d keys, revision %d, compacted at %d\n", res.Keys, res.Revision, res.CompactRevision)

	fmt.Fprintln(out, "3/6 taking a verified backup (lifeboat snapshot)")
	m, err := runSnapshot(ctx, cfg, lg, out)
	if err != nil {
		return err
	}

	fmt.Fprintln(out, "4/6 listing the store (lifeboat list)")
	if err := runList(ctx, cfg, lg, listOptions{output: "table"}, out, time.Now()); err != nil {
		return err
	}

	fmt.Fprintln(out, "5/6 verifying the stored backup offline (lifeboat verify latest)")
	if err := runVerify(ctx, cfg, lg, m.ID, out); err != nil {
		return err
	}

	fmt.Fprintln(out, "6/6 drilling it: restore into a scratch dir, boot a throwaway etcd, check (lifeboat drill latest)")
	rep, err := runDrill(ctx, a, cfg, lg, drillOptions{ref: m.ID, output: "table"})
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	printDemoSummary(out, programName(os.Args[0], wd), cfg, m.ID, rep.RecoverySeconds)
	return nil
}

func printDemoSummary(out io.Writer, prog string, cfg *Config, id string, recovery float64) {
	fmt.Fprintf(out, "\ndone: backup %s is stored in %s, verified, and drilled: it restores, in %.1fs.\n", id, cfg.Store.URL, recovery)
	fmt.Fprintf(out, "try:  %s list --store %s\n      %s drill latest --store %s --scratch-dir /tmp/lifeboat-scratch\n", prog, cfg.Store.URL, prog, cfg.Store.URL)
}

// programName is how to run this binary again, as the user ran it (arg0):
// a bare name came from PATH; a path under the working directory wd
// (make demo runs $PWD/.bin/lifeboat) is shown relative to it.
func programName(arg0, wd string) string {
	if !filepath.IsAbs(arg0) || wd == "" {
		return arg0
	}
	if rel, err := filepath.Rel(wd, arg0); err == nil && filepath.IsLocal(rel) {
		return rel
	}
	return arg0
}
