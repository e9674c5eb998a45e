package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"filippo.io/age"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/scrub"
)

type scrubOptions struct {
	output string
	dryRun bool
}

func newScrubCmd(a *app) *cobra.Command {
	var o scrubOptions
	c := &cobra.Command{
		Use:   "scrub",
		Short: "Check every retained object of the primary and each copy, and read a rotating share in full; exit 1 on damage",
		Long: `Scrub the store and every copy: every retained object (backups' data
objects and manifests, change segments, progress markers, drill reports,
recovery kits) must exist with its size, and every encrypted one must open
with the configured identities (a ranged read of its header); a rotating
share of the bytes (scrub.read_data, at least, and whatever is due) is read
in full and checked against its sha256, signature or own checksum, so that
every object is read at least once per scrub.cycle.

Damage found is recorded in the store (list, status and alerts show it).
An object that could not be read (a store or network error) is "not
checked", never good. Exit 0: sound; 1: damage found or objects not
checked; 2: unusable configuration or keys (no identity, or identities
that open not even the newest backup).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runScrub(cmd.Context(), cfg, a.logger(cfg), o, a.stdout, time.Now)
		},
	}
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "check and report, but record no damage and no rotation state")
	addOutputFlag(c, &o.output, "table or json")
	return c
}

// scrubStore is one store's scrub in `lifeboat scrub -o json`.
type scrubStore struct {
	Name string `json:"name"`
	*scrub.Result
	Error string `json:"error,omitempty"`
}

// runScrub scrubs the primary and each copy, prints what each found,
// and fails (exit 1) when any found damage or could not check an object,
// with exit 2 for keys or configuration no store can be judged with.
func runScrub(ctx context.Context, cfg *Config, lg *slog.Logger, o scrubOptions, out io.Writer, now func() time.Time) error {
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	type store struct {
		name string
		cfg  *Config
	}
	stores := []store{{"primary", cfg}}
	for _, cc := range cfg.Copies {
		stores = append(stores, store{cc.Name, cfg.copyConfig(cc)})
	}
	var results []scrubStore
	var errs []error
	for _, s := range stores {
		res, err := scrubOne(ctx, s.cfg, lg.With("store", s.name), ids, o, now)
		r := scrubStore{Name: s.name, Result: res}
		if err != nil {
			r.Error = err.Error()
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		} else if !res.Sound() {
			errs = append(errs, fmt.Errorf("%s: %s", s.name, verdictWords(res)))
		}
		results = append(results, r)
	}
	if err := printScrub(out, o.output, results); err != nil {
		return err
	}
	return errors.Join(errs...)
}

func scrubOne(ctx context.Context, cfg *Config, lg *slog.Logger, ids []age.Identity, o scrubOptions, now func() time.Time) (*scrub.Result, error) {
	repo, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	j := scrubJob(cfg, repo, ids)
	j.Now, j.DryRun = now, o.dryRun
	return scrub.Run(ctx, *j, lg)
}

// verdictWords says what is wrong with a run that is not sound.
func verdictWords(r *scrub.Result) string {
	switch {
	case len(r.Damaged) > 0 && len(r.NotChecked) > 0:
		return fmt.Sprintf("%d damaged objects, %d not checked", len(r.Damaged), len(r.NotChecked))
	case len(r.Damaged) > 0:
		return fmt.Sprintf("%d damaged objects", len(r.Damaged))
	}
	return fmt.Sprintf("%d objects not checked (the store could not be read: run again)", len(r.NotChecked))
}

func printScrub(out io.Writer, format string, results []scrubStore) error {
	if format == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(results)
	}
	for _, r := range results {
		if r.Result == nil {
			fmt.Fprintf(out, "%s: not scrubbed: %s\n", r.Name, r.Error)
			continue
		}
		printScrubResult(out, r.Name, r.Result)
	}
	return nil
}

func printScrubResult(out io.Writer, name string, r *scrub.Result) {
	verdict := "sound"
	if !r.Sound() {
		verdict = verdictWords(r)
	}
	fmt.Fprintf(out, "%s (%s): %s\n", name, r.Store, verdict)
	fmt.Fprintf(out, "  checked %d objects (%s stored): each exists with its size, encrypted ones open; %d read in full (%s read)\n",
		r.Objects, units.Bytes(r.TotalBytes), r.ObjectsRead, units.Bytes(r.BytesRead))
	if r.Untrusted > 0 {
		fmt.Fprintf(out, "  %d untrusted objects not scrubbed (see lifeboat list)\n", r.Untrusted)
	}
	for _, f := range r.Damaged {
		fmt.Fprintf(out, "  DAMAGED     %s %s: %s\n", f.Kind, f.Key, f.Problem)
	}
	for _, f := range r.NotChecked {
		fmt.Fprintf(out, "  NOT CHECKED %s %s: %s\n", f.Kind, f.Key, f.Problem)
	}
	for _, e := range r.RecordErrors {
		fmt.Fprintf(out, "  could not record: %s\n", e)
	}
}
