package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/repository"
)

type listOptions struct {
	output string
}

func newListCmd(a *app) *cobra.Command {
	var o listOptions
	c := &cobra.Command{
		Use:   "list",
		Short: "List the backups in the store, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runList(cmd.Context(), cfg, a.logger(cfg), o, a.stdout, time.Now())
		},
	}
	addOutputFlag(c, &o.output, "table or json")
	return c
}

// listedBackup is one row of `lifeboat list -o json`.
type listedBackup struct {
	ID       string               `json:"id"`
	State    string               `json:"state"`
	Problem  string               `json:"problem,omitempty"`
	Manifest *repository.Manifest `json:"manifest"`
	// LastDrill is the newest drill report of the backup, null when it
	// was never drilled or the report cannot be read.
	LastDrill *repository.DrillReport `json:"last_drill"`
	// DrillState is passed, failed, never, or unknown when the newest
	// report cannot be read (DrillError says why; an older report never
	// stands in for it).
	DrillState string `json:"drill_state"`
	DrillError string `json:"drill_error,omitempty"`
}

type listOutput struct {
	Store      string         `json:"store"`
	Cluster    string         `json:"cluster"`
	Backups    []listedBackup `json:"backups"`
	Orphans    []string       `json:"orphans"`
	Unreadable []string       `json:"unreadable_manifests"`
}

func runList(ctx context.Context, cfg *Config, lg *slog.Logger, o listOptions, out io.Writer, now time.Time) error {
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	l, err := backups.List(ctx)
	if err != nil {
		return fmt.Errorf("list backups: %w", err)
	}
	drills, err := backups.LastDrills(ctx)
	if err != nil {
		return fmt.Errorf("list drill reports: %w", err)
	}
	if o.output == "json" {
		res := listOutput{Store: backups.Store.String(), Cluster: cfg.Cluster, Backups: []listedBackup{}, Orphans: []string{}, Unreadable: []string{}}
		for _, e := range l.Backups {
			lb := listedBackup{ID: e.Manifest.ID, State: e.State, Problem: e.Problem, Manifest: e.Manifest}
			d := drills[e.Manifest.ID]
			lb.DrillState = d.State()
			if d != nil {
				lb.LastDrill = d.DrillReport
				if d.Err != nil {
					lb.DrillError = d.Err.Error()
				}
			}
			res.Backups = append(res.Backups, lb)
		}
		for _, o := range l.Orphans {
			res.Orphans = append(res.Orphans, o.Key)
		}
		for _, o := range l.Unreadable {
			res.Unreadable = append(res.Unreadable, o.Key)
		}
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	if len(l.Backups) == 0 {
		fmt.Fprintf(out, "no backups of cluster %q in %s\n", cfg.Cluster, backups.Store)
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAGE\tREVISION\tKEYS\tDB SIZE\tSTORED\tENCRYPTED\tSTATE\tLAST DRILL")
		for _, e := range l.Backups {
			m := e.Manifest
			state := e.State
			if e.Problem != "" {
				state += ": " + e.Problem
			}
			enc := "no"
			if m.Encryption != "none" {
				enc = m.Encryption
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", m.ID, humanAge(now.Sub(m.CreatedAt)), m.Revision, m.TotalKeys, humanBytes(m.DBSize), humanBytes(m.ObjectSize), enc, state, drillVerdict(drills[m.ID], now))
		}
		tw.Flush()
	}
	if n := len(l.Orphans); n > 0 {
		fmt.Fprintf(out, "%d data object(s) without a manifest (unfinished uploads; not backups; prune removes them)\n", n)
	}
	for _, u := range l.Unreadable {
		fmt.Fprintf(out, "unreadable manifest: %s\n", u.Key)
	}
	for _, e := range l.Backups {
		if d := drills[e.Manifest.ID]; d.State() == repository.DrillUnknown {
			fmt.Fprintf(out, "last drill of %s unknown: %v\n", e.Manifest.ID, d.Err)
		}
	}
	return nil
}

// drillVerdict renders a backup's last drill: "passed 2h ago (5.1s)",
// "FAILED 3d ago", "UNKNOWN" (the report cannot be read) or "never".
func drillVerdict(r *repository.LastDrill, now time.Time) string {
	switch r.State() {
	case repository.DrillNever:
		return "never"
	case repository.DrillUnknown:
		return "UNKNOWN (report unreadable)"
	}
	if r.Passed {
		return fmt.Sprintf("passed %s ago (%.1fs)", humanAge(now.Sub(r.FinishedAt)), r.RecoverySeconds)
	}
	return fmt.Sprintf("FAILED %s ago", humanAge(now.Sub(r.FinishedAt)))
}

// age renders a duration as a short human age.
func humanAge(d time.Duration) string {
	switch {
	case d < 0:
		return "future"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd", int(d.Hours()/24))
	}
}
