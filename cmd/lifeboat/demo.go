package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

type demoOptions struct {
	objects int
}

func newDemoCmd(a *app) *cobra.Command {
	var o demoOptions
	c := &cobra.Command{
		Use:   "demo",
		Short: "Self-contained tour: embedded etcd with Kubernetes-like data, a verified and drilled backup into ./lifeboat-demo, a deleted namespace brought back",
		Long: `demo starts an embedded etcd in a temporary directory, seeds it with
Kubernetes-like keys, takes a verified backup into ./lifeboat-demo (or
--store), lists and verifies it, drills it (restores it into a scratch dir,
boots a throwaway etcd on it and checks it). Then, with capture running (as
agent --capture, at a 200ms interval), the cluster keeps changing and
namespace payments-prod is deleted; lifeboat log finds the deletion,
restore --to-revision the revision before it restores into a scratch data
dir, booted and compared key by key with the state before, and ls and get
--for-apply show the deleted objects at that revision. It stops capture and
every etcd and removes the temporary directory, whatever happens. It needs
nothing but this binary.`,
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

// demoSteps is the number of steps the demo prints.
const demoSteps = 13

// demoRun is one run of the demo: what its steps share, and what the
// point-in-time steps found (its test checks them).
type demoRun struct {
	a   *app
	out io.Writer
	cfg *Config
	lg  *slog.Logger
	o   demoOptions
	tmp string
	// step is the number of the last step printed.
	step int
	// cli is the client of the demo's embedded etcd.
	cli *clientv3.Client
	// backup is the verified backup of step 3; recovery the drill's
	// measured recovery time.
	backup   *repository.Manifest
	recovery float64
	pitr     demoPITR
}

// stepf prints the next step's title: what it does and the command a
// user would type for it.
func (d *demoRun) stepf(format string, args ...any) {
	d.step++
	fmt.Fprintf(d.out, "%d/%d %s\n", d.step, demoSteps, fmt.Sprintf(format, args...))
}

func runDemo(ctx context.Context, a *app, flags *pflag.FlagSet, o demoOptions) error {
	cfg, err := demoConfig(a, flags)
	if err != nil {
		return err
	}
	d, err := playDemo(ctx, a, cfg, o)
	if err != nil {
		return err
	}
	wd, _ := os.Getwd()
	printDemoSummary(a.stdout, programName(os.Args[0], wd), cfg, d.backup.ID, d.recovery)
	printDemoPITRSummary(a.stdout, programName(os.Args[0], wd), cfg, &d.pitr)
	return nil
}

// demoConfig is the demo's configuration: embedded defaults; only the
// store and logging can be chosen, the etcd side is its own.
func demoConfig(a *app, flags *pflag.FlagSet) (*Config, error) {
	if !flags.Changed("store") && a.getenv("LIFEBOAT_STORE_URL") == "" {
		abs, err := filepath.Abs("lifeboat-demo")
		if err != nil {
			return nil, err
		}
		if err := flags.Set("store", "file://"+abs); err != nil {
			return nil, err
		}
	}
	if !flags.Changed("log-level") && a.getenv("LIFEBOAT_LOG_LEVEL") == "" {
		_ = flags.Set("log-level", "warn")
	}
	return a.uploadConfig()
}

// playDemo runs the demo's steps in a temporary directory it removes
// afterwards, whatever happens; every server and the capture it starts
// are stopped before it returns.
func playDemo(ctx context.Context, a *app, cfg *Config, o demoOptions) (*demoRun, error) {
	tmp, err := os.MkdirTemp("", "lifeboat-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: temporary directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	cfg.Snapshot.SpoolDir = filepath.Join(tmp, "spool")
	cfg.Drill.ScratchDir = filepath.Join(tmp, "scratch")
	cfg.Drill.CheckPrefixes = []string{"/registry/namespaces/"}
	cfg.Inspect.CacheDir = filepath.Join(tmp, "cache")
	d := &demoRun{a: a, out: a.stdout, cfg: cfg, lg: a.logger(cfg), o: o, tmp: tmp}

	d.stepf("starting an embedded etcd in %s", tmp)
	srv, err := child.StartEtcd(ctx, child.EtcdOptions{DataDir: filepath.Join(tmp, "etcd"), Name: "demo"})
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	defer srv.Close()
	cfg.Etcd = EtcdConfig{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Member: "any"}
	if d.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()}); err != nil {
		return nil, fmt.Errorf("demo: connect to embedded etcd: %w", err)
	}
	defer d.cli.Close()
	for _, step := range []func(context.Context) error{d.seed, d.takeBackup, d.list, d.verify, d.drill, d.pointInTime} {
		if err := step(ctx); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// seed writes the Kubernetes-like data, and real objects in demoNamespace.
func (d *demoRun) seed(ctx context.Context) error {
	d.stepf("seeding %d Kubernetes-like objects (/registry/...), with a real Deployment and ConfigMap in namespace %s", d.o.objects, demoNamespace)
	res, err := seed.Kubernetes(ctx, d.cli, seed.Options{Objects: d.o.objects, Compact: true, Seed: 1})
	if err != nil {
		return fmt.Errorf("demo: seed: %w", err)
	}
	objs, err := demoKubeObjects()
	if err != nil {
		return err
	}
	var ops []clientv3.Op
	for k, v := range objs {
		ops = append(ops, clientv3.OpPut(k, string(v)))
	}
	tr, err := d.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return fmt.Errorf("demo: write the objects of %s: %w", demoNamespace, err)
	}
	n, err := d.cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("demo: count the keys: %w", err)
	}
	fmt.Fprintf(d.out, "    %d keys, revision %d, compacted at %d\n", n.Count, tr.Header.Revision, res.CompactRevision)
	return nil
}

func (d *demoRun) takeBackup(ctx context.Context) error {
	d.stepf("taking a verified backup (lifeboat snapshot)")
	m, err := runSnapshot(ctx, d.cfg, d.lg, d.out)
	d.backup = m
	return err
}

func (d *demoRun) list(ctx context.Context) error {
	d.stepf("listing the store (lifeboat list)")
	return runList(ctx, d.cfg, d.lg, listOptions{output: "table"}, d.out, time.Now())
}

func (d *demoRun) verify(ctx context.Context) error {
	d.stepf("verifying the stored backup offline (lifeboat verify latest)")
	return runVerify(ctx, d.cfg, d.lg, d.backup.ID, d.out)
}

func (d *demoRun) drill(ctx context.Context) error {
	d.stepf("drilling it: restore into a scratch dir, boot a throwaway etcd, check (lifeboat drill latest)")
	rep, err := runDrill(ctx, d.a, d.cfg, d.lg, drillOptions{ref: d.backup.ID, output: "table"})
	if err != nil {
		return err
	}
	d.recovery = rep.RecoverySeconds
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
