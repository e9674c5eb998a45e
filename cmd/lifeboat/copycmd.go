package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/replica"
)

type copyOptions struct {
	dryRun bool
	output string
}

func newCopyCmd(a *app) *cobra.Command {
	var o copyOptions
	c := &cobra.Command{
		Use:   "copy",
		Short: "Bring every configured copy up to date with the primary store (exit 1 if any copy failed)",
		Long: `Copies every committed backup of the primary store that a copy's retention
keeps and the copy lacks (data object checked in the copy, recovery kit,
manifest last), and the change windows after compaction. The agent does
this in the background after every backup; this is the one-shot catch-up.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.uploadConfig() // the copies' part buffers
			if err != nil {
				return err
			}
			return runCopy(cmd.Context(), cfg, a.logger(cfg), o, a.stdout)
		},
	}
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "list what would be copied, copy nothing")
	addOutputFlag(c, &o.output, "table or json")
	return c
}

// errNoCopies is the configuration mistake of running copy without copies.
var errNoCopies = &ConfigError{Key: "copies", Err: errors.New("no copies configured: list them under copies in the config file, or give --copy URL")}

func runCopy(ctx context.Context, cfg *Config, lg *slog.Logger, o copyOptions, out io.Writer) error {
	if len(cfg.Copies) == 0 {
		return errNoCopies
	}
	primary, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	copies, err := openCopies(ctx, cfg, lg)
	if err != nil {
		return err
	}
	var results []*replica.Result
	var failed []string
	damaged := 0
	for _, cs := range copies {
		job := cfg.copyJob(primary, cs)
		job.DryRun = o.dryRun
		res, err := replica.Run(ctx, job, lg)
		results = append(results, res)
		if err != nil {
			failed = append(failed, cs.cfg.Name)
			if errors.Is(err, replica.ErrDamaged) {
				damaged++
			}
			lg.Error("copy failed", "store", cs.cfg.Name, "err", err)
		}
		if o.output == "table" {
			printCopy(out, res, err, o.dryRun)
		}
	}
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if err := enc.Encode(results); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return copyFailed(failed, damaged, len(copies))
	}
	return nil
}

// printCopy writes one copy's summary (and, dry, its plan).
func printCopy(out io.Writer, res *replica.Result, err error, dry bool) {
	counts := map[string]int{}
	var bytes int64
	for _, p := range res.Copied {
		counts[p.Kind]++
		bytes += p.Size
		if dry {
			fmt.Fprintf(out, "would copy %s %s (%s) to %s\n", p.Kind, p.Key, units.Bytes(p.Size), res.Name)
		}
	}
	verb := "copied"
	if dry {
		verb = "would copy"
	} else {
		bytes = res.Bytes
	}
	fmt.Fprintf(out, "copy %s: %s %d backups, %d kits, %d segments, %d markers (%s)", res.Name, verb,
		counts[replica.KindBackup], counts[replica.KindKit], counts[replica.KindSegment], counts[replica.KindMarker], units.Bytes(bytes))
	if res.Adopted+res.Replaced > 0 {
		fmt.Fprintf(out, "; %d left by an earlier run kept, %d replaced", res.Adopted, res.Replaced)
	}
	switch {
	case err != nil:
		fmt.Fprintf(out, "; FAILED: %v\n", err)
	case dry:
		fmt.Fprintln(out)
	case res.RecoveryPoint.IsZero():
		fmt.Fprintf(out, "; it holds no backup\n")
	default:
		fmt.Fprintf(out, "; it holds %d backups, recovery point %s (with changes %s)\n", res.Backups,
			res.RecoveryPoint.UTC().Format(time.RFC3339), res.ChangesPoint.UTC().Format(time.RFC3339))
	}
}

// copyFailed is runCopy's error when copies failed: for damaged objects
// of the primary (replica.ErrDamaged) it says that running again does
// not help; for other failures that a run continues from what is
// committed.
func copyFailed(failed []string, damaged, total int) error {
	names := strings.Join(failed, ", ")
	if damaged == len(failed) {
		return fmt.Errorf("%d of %d copies are incomplete (%s): the primary holds damaged objects they lack, named above and recorded there; everything else was copied. Repair or prune the damaged objects in the primary (docs/pitr.md#damage): running copy again does not help", len(failed), total, names)
	}
	return fmt.Errorf("%d of %d copies failed (%s), see the errors above: what each committed stays, and a run after the cause is fixed continues from there", len(failed), total, names)
}
