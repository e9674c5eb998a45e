package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
)

type drillOptions struct {
	ref    string
	output string
}

func newDrillCmd(a *app) *cobra.Command {
	var o drillOptions
	c := &cobra.Command{
		Use:   "drill [ID|latest|latest-proven|random]",
		Short: "Rehearse a restore end to end, record the report beside the backup; exit 1 if any check fails",
		Long: `drill fetches a backup, decrypts and decompresses it, verifies it, restores
it with etcdutl into a scratch dir (drill.scratch_dir; about twice the
database size must be free), boots a throwaway etcd on it in a process of
its own (unix sockets in the scratch dir, no TCP port, a fresh cluster
token; --etcd-binary to match your cluster's etcd) and checks revision, key
count and HashKV against the manifest, the --check-prefix prefixes and a
test write. The scratch dir is emptied afterwards, whatever happens.

It prints each phase's duration; their sum is the measured recovery time.
A verdict (passed, or a content check failed, or etcd refused or crashed
on the restored data) is stored at <cluster>/drills/<id>/<time>.json;
lifeboat list shows the last verdict of each backup. A drill that could
not run to a verdict (store, download, space, identity, timeout) exits 1
and stores nothing. "random" drills an older backup
chosen at random, so that over time every retained backup gets proven.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.ref = "latest"
			if len(args) == 1 {
				o.ref = args[0]
			}
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			_, err = runDrill(cmd.Context(), a, cfg, a.logger(cfg), o)
			return err
		},
	}
	addOutputFlag(c, &o.output, "table or json (the report)")
	return c
}

// reportTimeout bounds storing a drill's report, which happens even when
// the drill failed.
const reportTimeout = time.Minute

func runDrill(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o drillOptions) (*repository.DrillReport, error) {
	out := a.stdout
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	ids, err := identities(cfg)
	if err != nil {
		return nil, err
	}
	m, err := selectBackup(ctx, backups, o.ref, "", time.Now())
	if err != nil {
		return nil, err
	}
	if o.output == "table" {
		fmt.Fprintf(out, "drilling backup %s (revision %d, %d keys, %s) in %s\n", m.ID, m.Revision, m.TotalKeys, humanBytes(m.DBSize), cfg.Drill.ScratchDir)
	}
	p := newProgress(a.stderr, lg, "download", m.ObjectSize)
	rep, err := restore.Drill(ctx, restore.DrillOptions{
		Backups: backups, Manifest: m, Identities: ids,
		ScratchDir: cfg.Drill.ScratchDir, EtcdBinary: cfg.Drill.EtcdBinary, CheckPrefixes: cfg.Drill.CheckPrefixes,
		Timeout: cfg.Drill.Timeout, Progress: p.update, Logger: lg, Version: Version,
	})
	p.done()
	if rep == nil {
		return nil, err
	}
	if ctx.Err() != nil {
		// Interrupted (SIGINT/SIGTERM): not a verdict on the backup, so
		// no report is stored (as the agent does).
		if o.output == "table" {
			printDrillReport(out, rep)
		}
		return rep, fmt.Errorf("drill of backup %s interrupted, no report stored: %w", m.ID, err)
	}
	if !restore.Verdict(err) {
		// The drill could not run to a verdict (store, download, space,
		// identity, timeout): an error of the run, not of the backup, so
		// no report is stored and the backup's last verdict stands.
		if o.output == "table" {
			printDrillReport(out, rep)
		}
		return rep, fmt.Errorf("drill of backup %s could not run, no report stored (the backup's last verdict stands): %w", m.ID, err)
	}
	// The report is stored also when the drill failed; a parent context
	// ending now must not lose it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	perr := backups.PutDrillReport(wctx, rep)
	cancel()
	switch o.output {
	case "json":
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return rep, jerr
		}
	default:
		printDrillReport(out, rep)
		if perr == nil {
			fmt.Fprintf(out, "report stored at %s\n", backups.DrillReportKey(rep.BackupID, rep.StartedAt))
		}
	}
	if perr != nil {
		perr = fmt.Errorf("store the drill report: %w", perr)
	}
	if errors.Is(err, restore.ErrDrillFailed) {
		return rep, errors.Join(fmt.Errorf("backup %s: %w", m.ID, err), perr)
	}
	return rep, perr
}

// printDrillReport prints a report: verdict, phases with their sum, checks.
func printDrillReport(out io.Writer, r *repository.DrillReport) {
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(out, "drill of backup %s: %s, measured recovery time %.2fs", r.BackupID, verdict, r.RecoverySeconds)
	if r.Etcd != "" {
		fmt.Fprintf(out, " (etcd: %s)", r.Etcd)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PHASE\tSECONDS")
	var sum float64
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "  %s\t%.3f\n", p.Name, p.Seconds)
		sum += p.Seconds
	}
	fmt.Fprintf(tw, "  total\t%.3f\n", sum)
	tw.Flush()
	if len(r.Checks) > 0 {
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  CHECK\tRESULT\tEXPECTED\tACTUAL")
		for _, c := range r.Checks {
			res, actual := "ok", oneLine(c.Actual)
			if !c.Passed {
				res = "FAILED"
			} else if c.Actual == c.Expected {
				actual = "(same)"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", c.Name, res, oneLine(c.Expected), actual)
		}
		tw.Flush()
	}
	if r.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", r.Error)
	}
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// maxArgs is cobra.MaximumNArgs as a usage error (exit 2).
func maxArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) > n {
			return usagef("%s takes at most %d argument(s), got %d (see %s --help)", cmd.Name(), n, len(args), cmd.CommandPath())
		}
		return nil
	}
}
