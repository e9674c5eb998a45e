package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path"
	"strings"
	"text/tabwriter"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

type drillOptions struct {
	ref    string
	output string
	// toRevision and toTime are a point-in-time drill's target (0 and
	// "": a plain drill).
	toRevision int64
	toTime     string
}

func newDrillCmd(a *app) *cobra.Command {
	var o drillOptions
	c := &cobra.Command{
		Use:   "drill [ID|latest|latest-proven|random] | drill --to-revision R | --to-time T",
		Short: "Rehearse a restore end to end, record the report beside the backup; exit 1 if any check fails",
		Long: `drill fetches a backup, decrypts and decompresses it, verifies it, restores
it where it lies in a scratch dir (drill.scratch_dir; the database size must
be free, twice that for a point-in-time drill), boots a throwaway etcd on it in a process of
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
chosen at random, so that over time every retained backup gets proven.

--to-revision R (or --to-time T) drills a point-in-time restore: the
snapshot and captured changes a restore --to-revision R would use are
fetched, checked and replayed to R, restored and booted, and the restored
member's HashKV at R, after compacting it to the live cluster's compact
revision, must equal the live cluster's HashKV at R (it needs the etcd
endpoints). R must be at or above the live compact revision. The report is
stored beside the start snapshot.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("to-revision") && o.toRevision == 0 {
				return usagef("--to-revision 0: revisions start at 1")
			}
			ro := restoreOptions{toRevision: o.toRevision, toTime: o.toTime}
			if _, pitr, err := ro.target(); err != nil {
				return err
			} else if pitr && len(args) == 1 {
				return usagef("--to-revision and --to-time pick the snapshot themselves: give no backup id with them")
			}
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
	c.Flags().Int64Var(&o.toRevision, "to-revision", 0, "drill a point-in-time restore to revision R and compare its HashKV with the live cluster's at R")
	c.Flags().StringVar(&o.toTime, "to-time", "", "drill a point-in-time restore to time T (as restore --to-time takes it)")
	return c
}

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
	m, pt, closeLive, err := drillSource(ctx, cfg, lg, backups, ids, o)
	if err != nil {
		return nil, err
	}
	defer closeLive()
	if o.output == "table" {
		fmt.Fprintf(out, "drilling backup %s (revision %d, %d keys, %s) in %s\n", m.ID, m.Revision, m.TotalKeys, units.Bytes(m.DBSize), cfg.Drill.ScratchDir)
		if pt != nil {
			printPlan(out, pt.Plan)
		}
	}
	p := newProgress(a.stderr, lg, "download", m.ObjectSize)
	// The agent's drill job stores its reports by the same rule.
	d, err := drill.RunAndStore(ctx, drill.Options{
		Backups: backups, Manifest: m, Identities: ids,
		ScratchDir: cfg.Drill.ScratchDir, EtcdBinary: cfg.Drill.EtcdBinary, CheckPrefixes: cfg.Drill.CheckPrefixes,
		Timeout: cfg.Drill.Timeout, Progress: p.update, Logger: lg, Version: Version, PointInTime: pt,
	})
	p.done()
	return drillResult(out, backups, m, o, d, err)
}

// drillSource is the backup to drill: the one --backup selects, or, for
// a point in time, the plan's snapshot with the plan and a session to the
// live cluster (closed by closeLive), lifeboat's soft memory limit lifted
// for the replay.
func drillSource(ctx context.Context, cfg *Config, lg *slog.Logger, backups *repository.Repo, ids []age.Identity, o drillOptions) (_ *repository.Manifest, _ *drill.PointInTimeOptions, closeLive func(), _ error) {
	target, pitr, err := restoreOptions{toRevision: o.toRevision, toTime: o.toTime}.target()
	if err != nil {
		return nil, nil, nil, err
	}
	if !pitr {
		m, err := selectBackup(ctx, backups, o.ref, "", time.Now())
		return m, nil, func() {}, err
	}
	plan, err := planPointInTime(ctx, backups, ids, target, "drill", "drilled")
	if err != nil {
		return nil, nil, nil, err
	}
	sess, err := snapshot.Dial(ctx, etcdConfig(cfg), lg)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("point-in-time drill: the live cluster: %w", err)
	}
	return plan.Snapshot, &drill.PointInTimeOptions{Plan: plan, Live: drill.SessionLive(sess)}, func() { sess.Close() }, nil
}

// drillResult prints the drill d of backup m (its error err) as
// --output says and returns the command's report and error: a verdict
// with the report stored, or an error of the run with none stored.
func drillResult(out io.Writer, backups *repository.Repo, m *repository.Manifest, o drillOptions, d drill.Stored, err error) (*repository.DrillReport, error) {
	rep := d.Report
	if rep == nil {
		return nil, err
	}
	if !d.Verdict {
		if o.output == "table" {
			printNoVerdict(out, rep, d.Interrupted)
		}
		if d.Interrupted {
			// SIGINT/SIGTERM: not a verdict on the backup.
			return rep, fmt.Errorf("drill of backup %s interrupted, no report stored: %w", m.ID, err)
		}
		// The drill could not run to a verdict (store, download, space,
		// identity, timeout): an error of the run, not of the backup.
		return rep, fmt.Errorf("drill of backup %s could not run, no report stored (the backup's last verdict stands): %w", m.ID, err)
	}
	perr := d.StoreErr
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
	if errors.Is(err, drill.ErrFailed) {
		return rep, errors.Join(fmt.Errorf("backup %s: %w", m.ID, err), perr)
	}
	return rep, perr
}

// printDrillReport prints a report: verdict, phases with their sum, checks.
// printNoVerdict prints a drill that ended without a verdict: one line
// that says so (never FAILED: the backup was not found wanting) and the
// phases it got through.
func printNoVerdict(out io.Writer, r *repository.DrillReport, interrupted bool) {
	what := "COULD NOT RUN (no verdict on the backup)"
	if interrupted {
		what = "INTERRUPTED (no verdict on the backup)"
	}
	fmt.Fprintf(out, "drill of backup %s: %s\n", r.BackupID, what)
	if len(r.Phases) == 0 {
		return
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  PHASE DONE\tSECONDS")
	for _, p := range r.Phases {
		fmt.Fprintf(tw, "  %s\t%.3f\n", p.Name, p.Seconds)
	}
	tw.Flush()
}

func printDrillReport(out io.Writer, r *repository.DrillReport) {
	verdict := "PASSED"
	if !r.Passed {
		verdict = "FAILED"
	}
	what := "backup " + r.BackupID
	if pt := r.PointInTime; pt != nil {
		what = fmt.Sprintf("revision %d (backup %s + changes)", pt.TargetRevision, r.BackupID)
	}
	fmt.Fprintf(out, "drill of %s: %s, measured recovery time %.2fs", what, verdict, r.RecoverySeconds)
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
	if pt := r.PointInTime; pt != nil {
		fmt.Fprintf(out, "  point in time: revision %d of generation %s from snapshot %s at revision %d\n", pt.TargetRevision, pt.Generation, r.BackupID, pt.SnapshotRevision)
		if pt.Segments > 0 {
			fmt.Fprintf(out, "  replayed %d revisions (%d operations, %d leases) from %d segments (%s … %s) in %.3fs: %.0f revisions/s\n",
				pt.Revisions, pt.Ops, pt.Leases, pt.Segments, path.Base(pt.FirstSegment), path.Base(pt.LastSegment), pt.ReplaySeconds, pt.RevisionsPerSecond)
		}
		fmt.Fprintf(out, "  hashkv at %d: live 0x%08x (compact %d, %s), restored 0x%08x (compact %d)\n",
			pt.TargetRevision, pt.LiveHashKV, pt.LiveCompactRevision, orDash(pt.LiveEndpoint), pt.RestoredHashKV, pt.RestoredCompactRevision)
	}
	if r.Error != "" {
		fmt.Fprintf(out, "  error: %s\n", r.Error)
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
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
