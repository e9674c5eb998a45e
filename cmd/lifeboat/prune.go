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

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
)

type pruneOptions struct {
	dryRun bool
	output string
}

func newPruneCmd(a *app) *cobra.Command {
	var o pruneOptions
	c := &cobra.Command{
		Use:   "prune",
		Short: "Apply the retention policy: delete the backups no rule keeps, remove orphans (--dry-run prints the plan)",
		Long: `Apply the retention policy (retention.keep_* keys, --keep-* flags) to the
cluster's backups. A backup is kept when any rule keeps it; the newest
backup, the newest backup whose last drill passed, a newer backup whose
last drill is unknown (its report unreadable), and backups under Object
Lock or legal hold are never deleted. Each backup goes manifest first, then
its data object, then its drill reports. Data objects without a manifest,
drill reports without a backup and incomplete multipart uploads older than
retention.orphan_grace (by store time and by backup id time) are removed;
the grace must be at least (agent.snapshot_retries + 1) x snapshot.timeout
plus the retry backoff. Broken backups (data object missing) are reported,
never deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runPrune(cmd.Context(), cfg, a.logger(cfg), o, a.stdout, time.Now())
		},
	}
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the plan, change nothing")
	addOutputFlag(c, &o.output, "table or json")
	return c
}

// prunedBackup is one row of the plan in `lifeboat prune -o json`.
type prunedBackup struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Size      int64     `json:"size"`
	// Action is keep, delete, locked or skip.
	Action  string   `json:"action"`
	Reasons []string `json:"reasons"`
	Problem string   `json:"problem,omitempty"`
	// Deleted is true once manifest, object and drill reports are gone.
	Deleted bool `json:"deleted"`
}

type prunedObject struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time"`
	Reason  string    `json:"reason,omitempty"`
}

type prunedUpload struct {
	Key       string    `json:"key"`
	UploadID  string    `json:"upload_id"`
	Initiated time.Time `json:"initiated"`
}

type brokenBackup struct {
	ID      string `json:"id"`
	Problem string `json:"problem"`
}

// prunedGeneration is one capture generation in `lifeboat prune -o json`.
type prunedGeneration struct {
	Generation   string    `json:"generation"`
	FromRevision int64     `json:"from_revision"`
	Through      int64     `json:"through_revision"`
	ThroughTime  time.Time `json:"through_time"`
	Segments     int       `json:"segments"`
	// Action is keep, delete or skip; Reasons say what keeps it.
	Action  string   `json:"action"`
	Reasons []string `json:"reasons"`
	Problem string   `json:"problem,omitempty"`
	// Objects is how many objects (markers, segments, stray) go with it.
	Objects int  `json:"objects"`
	Deleted bool `json:"deleted"`
}

type pruneSummary struct {
	Backups        int `json:"backups"`
	Kept           int `json:"kept"`
	Delete         int `json:"delete"`
	Deleted        int `json:"deleted"`
	Locked         int `json:"locked"`
	Skipped        int `json:"skipped"`
	Orphans        int `json:"orphans"`
	OrphansRemoved int `json:"orphans_removed"`
	Uploads        int `json:"incomplete_uploads"`
	UploadsAborted int `json:"uploads_aborted"`
	Broken         int `json:"broken"`
	Unreadable     int `json:"unreadable_manifests"`
	Errors         int `json:"errors"`
	// Generations of change segments: kept, to delete, deleted; markers:
	// superseded progress markers to remove, removed.
	Generations        int `json:"generations"`
	GenerationsKept    int `json:"generations_kept"`
	GenerationsDelete  int `json:"generations_delete"`
	GenerationsDeleted int `json:"generations_deleted"`
	Markers            int `json:"superseded_markers"`
	MarkersRemoved     int `json:"markers_removed"`
}

type pruneOutput struct {
	Store             string         `json:"store"`
	Cluster           string         `json:"cluster"`
	Policy            string         `json:"policy"`
	Now               time.Time      `json:"now"`
	DryRun            bool           `json:"dry_run"`
	Backups           []prunedBackup `json:"backups"`
	Orphans           []prunedObject `json:"orphans"`
	OrphansKept       []prunedObject `json:"orphans_kept"`
	IncompleteUploads []prunedUpload `json:"incomplete_uploads"`
	Broken            []brokenBackup `json:"broken"`
	Unreadable        []string       `json:"unreadable_manifests"`
	// UnreadableWhy says why each unreadable manifest could not be read.
	UnreadableWhy map[string]string  `json:"unreadable_why,omitempty"`
	Generations   []prunedGeneration `json:"generations"`
	Markers       []prunedObject     `json:"superseded_markers"`
	Summary       pruneSummary       `json:"summary"`
	Errors        []string           `json:"errors"`
	// Kits are the recovery kits and what prune does with each.
	Kits []prunedKit `json:"kits"`
}

// runPrune prunes the configured store at now and prints what it did (or,
// with --dry-run, would do). Errors with single backups are printed with
// the rest and make it return an error (exit 1) at the end.
func runPrune(ctx context.Context, cfg *Config, lg *slog.Logger, o pruneOptions, out io.Writer, now time.Time) error {
	err := pruneStore(ctx, cfg, lg, o, out, now)
	// Each copy by its own policy, with its own drill reports: its newest
	// proven backup is kept in it. With -o json, one object per store.
	for _, cc := range cfg.Copies {
		if o.output == "table" {
			fmt.Fprintf(out, "\ncopy %s (%s):\n", cc.Name, cc.URL)
		}
		if cerr := pruneStore(ctx, cfg.copyConfig(cc), lg.With("store", cc.Name), o, out, now); cerr != nil {
			err = errors.Join(err, fmt.Errorf("copy %s: %w", cc.Name, cerr))
		}
	}
	return err
}

// pruneStore prunes the store cfg names (the primary, or a copy by its
// copyConfig).
func pruneStore(ctx context.Context, cfg *Config, lg *slog.Logger, o pruneOptions, out io.Writer, now time.Time) error {
	policy, err := cfg.Retention.Policy()
	if err != nil {
		return err
	}
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	// The newest backup whose last drill passed is never deleted.
	drills, err := backups.LastDrills(ctx)
	if err != nil {
		return fmt.Errorf("read drill reports: %w", err)
	}
	// A backup whose last verdict cannot be read is kept when it may be
	// that backup.
	passed, unknown := make(map[string]bool, len(drills)), map[string]bool{}
	for id, r := range drills {
		switch r.State() {
		case repository.DrillPassed:
			passed[id] = true
		case repository.DrillUnknown:
			unknown[id] = true
			lg.Warn("last drill of backup unknown: kept if it may be the newest proven", "backup_id", id, "err", r.Err)
		}
	}
	res, err := prune.Run(ctx, prune.Job{
		Backups:      backups,
		Policy:       policy,
		OrphanGrace:  time.Duration(cfg.Retention.OrphanGrace),
		DryRun:       o.dryRun,
		Now:          func() time.Time { return now },
		DrillPassed:  passed,
		DrillUnknown: unknown,
	}, lg)
	if res == nil {
		return err
	}
	rep := pruneReport(res, o.dryRun)
	rep.Store, rep.Cluster, rep.Policy = backups.Store.String(), cfg.Cluster, policy.String()
	if o.output == "json" {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return jerr
		}
	} else {
		printPrune(out, rep, now)
	}
	if err != nil {
		return fmt.Errorf("prune finished with %d error(s): %w", len(res.Errors), err)
	}
	return nil
}

// pruneReport turns the result into the printed report: the backups, the
// capture generations, the other objects, the kits.
func pruneReport(res *prune.Result, dryRun bool) pruneOutput {
	rep := pruneOutput{
		Now: res.Plan.Now, DryRun: dryRun,
		Backups: []prunedBackup{}, Orphans: []prunedObject{}, OrphansKept: []prunedObject{},
		IncompleteUploads: []prunedUpload{}, Broken: []brokenBackup{}, Unreadable: []string{}, Errors: []string{},
		Generations: []prunedGeneration{}, Markers: []prunedObject{},
	}
	reportBackups(&rep, res)
	reportGenerations(&rep, res)
	reportObjects(&rep, res)
	rep.Kits = prunedKits(res)
	return rep
}

// reportBackups adds the backups' decisions and counts to the report.
func reportBackups(rep *pruneOutput, res *prune.Result) {
	deleted := setOf(res.Deleted)
	s := &rep.Summary
	for _, pb := range res.Plan.Backups {
		m := pb.Entry.Manifest
		rep.Backups = append(rep.Backups, prunedBackup{
			ID: m.ID, CreatedAt: m.CreatedAt, Size: pb.Entry.Object.Size, Action: string(pb.Action),
			Reasons: nonNil(pb.Decision.Reasons), Problem: pb.Problem, Deleted: deleted[m.ID],
		})
		s.Backups++
		switch pb.Action {
		case prune.ActionKeep:
			s.Kept++
		case prune.ActionDelete:
			s.Delete++
		case prune.ActionLocked:
			s.Locked++
		case prune.ActionSkip:
			s.Skipped++
		}
	}
	s.Deleted = len(res.Deleted)
}

// reportGenerations adds the capture generations' decisions and counts to
// the report.
func reportGenerations(rep *pruneOutput, res *prune.Result) {
	deleted := setOf(res.Generations)
	s := &rep.Summary
	for _, pg := range res.Plan.Generations {
		w := pg.Window
		rep.Generations = append(rep.Generations, prunedGeneration{
			Generation: w.Generation, FromRevision: w.From, Through: w.Through, ThroughTime: w.ThroughTime, Segments: len(w.Segments),
			Action: string(pg.Action), Reasons: nonNil(pg.Decision.Reasons), Problem: pg.Problem, Objects: len(pg.Delete), Deleted: deleted[w.Generation],
		})
		s.Generations++
		switch pg.Action {
		case prune.ActionKeep:
			s.GenerationsKept++
		case prune.ActionDelete:
			s.GenerationsDelete++
		}
	}
	s.GenerationsDeleted = len(res.Generations)
}

// reportObjects adds what is not a backup or a generation to the report:
// superseded progress markers, orphans (removed and kept), incomplete
// uploads, broken backups, unreadable manifests and the errors.
func reportObjects(rep *pruneOutput, res *prune.Result) {
	p, s := res.Plan, &rep.Summary
	for _, o := range p.Markers {
		rep.Markers = append(rep.Markers, prunedObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime, Reason: "superseded by a newer marker of its generation"})
	}
	for _, o := range p.Orphans {
		rep.Orphans = append(rep.Orphans, prunedObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
	}
	for _, k := range p.OrphansKept {
		rep.OrphansKept = append(rep.OrphansKept, prunedObject{Key: k.Object.Key, Size: k.Object.Size, ModTime: k.Object.ModTime, Reason: k.Reason})
	}
	for _, u := range p.IncompleteUploads {
		rep.IncompleteUploads = append(rep.IncompleteUploads, prunedUpload{Key: u.Key, UploadID: u.UploadID, Initiated: u.Initiated})
	}
	for _, e := range p.Broken {
		rep.Broken = append(rep.Broken, brokenBackup{ID: e.Manifest.ID, Problem: e.Problem})
	}
	for _, u := range p.Unreadable {
		rep.Unreadable = append(rep.Unreadable, u.Key)
	}
	rep.UnreadableWhy = p.UnreadableWhy
	for _, err := range res.Errors {
		rep.Errors = append(rep.Errors, err.Error())
	}
	s.Markers, s.MarkersRemoved = len(p.Markers), res.MarkersRemoved
	s.Orphans, s.OrphansRemoved = len(p.Orphans), res.OrphansRemoved
	s.Uploads, s.UploadsAborted = len(p.IncompleteUploads), res.UploadsAborted
	s.Broken, s.Unreadable, s.Errors = res.Broken, len(p.Unreadable), len(res.Errors)
}

// setOf is the set of the strings in l.
func setOf(l []string) map[string]bool {
	set := make(map[string]bool, len(l))
	for _, v := range l {
		set[v] = true
	}
	return set
}

// nonNil is l, or an empty list for nil (JSON [] rather than null).
func nonNil(l []string) []string {
	if l == nil {
		return []string{}
	}
	return l
}

// decision is the DECISION column: "keep (last, daily 2026-11-29)",
// "delete", "deleted", "locked: kept", "skip: …".
func (b prunedBackup) decision(dryRun bool) string {
	switch prune.Action(b.Action) {
	case prune.ActionKeep:
		return "keep (" + strings.Join(b.Reasons, ", ") + ")"
	case prune.ActionLocked:
		return "locked: kept"
	case prune.ActionSkip:
		return "skip: " + b.Problem
	}
	switch {
	case dryRun:
		return "delete"
	case b.Deleted:
		return "deleted"
	default:
		return "delete failed"
	}
}

// decision is a generation's DECISION column, like a backup's.
func (g prunedGeneration) decision(dryRun bool) string {
	switch prune.Action(g.Action) {
	case prune.ActionKeep:
		return "keep (" + strings.Join(g.Reasons, ", ") + ")"
	case prune.ActionSkip:
		return "skip: " + g.Problem
	case prune.ActionLocked:
		return "locked: kept (" + g.Problem + ")"
	}
	what := fmt.Sprintf("delete %d object(s), before its snapshot", g.Objects)
	switch {
	case dryRun:
		return what
	case g.Deleted:
		return "deleted"
	default:
		return "delete failed"
	}
}

func printPrune(out io.Writer, rep pruneOutput, now time.Time) {
	if rep.DryRun {
		fmt.Fprintf(out, "dry run: nothing is changed\n")
	}
	fmt.Fprintf(out, "policy: %s\n", rep.Policy)
	if len(rep.Backups) == 0 {
		fmt.Fprintf(out, "no backups of cluster %q in %s\n", rep.Cluster, rep.Store)
	} else {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tAGE\tSIZE\tDECISION")
		for _, b := range rep.Backups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", b.ID, humanAge(now.Sub(b.CreatedAt)), units.Bytes(b.Size), b.decision(rep.DryRun))
		}
		tw.Flush()
	}
	remove, abort := "removed", "aborted"
	if rep.DryRun {
		remove, abort = "would remove", "would abort"
	}
	if len(rep.Generations) > 0 {
		tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "GENERATION\tREVISIONS\tENDS\tSEGMENTS\tDECISION")
		for _, g := range rep.Generations {
			fmt.Fprintf(tw, "%s\t%d-%d\t%s ago\t%d\t%s\n", g.Generation, g.FromRevision, g.Through, humanAge(now.Sub(g.ThroughTime)), g.Segments, g.decision(rep.DryRun))
		}
		tw.Flush()
	}
	for _, m := range rep.Markers {
		fmt.Fprintf(out, "progress marker %s (%s old): %s, %s\n", m.Key, humanAge(now.Sub(m.ModTime)), m.Reason, remove)
	}
	for _, o := range rep.Orphans {
		fmt.Fprintf(out, "orphan %s (%s old, %s): %s\n", o.Key, humanAge(now.Sub(o.ModTime)), units.Bytes(o.Size), remove)
	}
	for _, o := range rep.OrphansKept {
		fmt.Fprintf(out, "orphan %s (%s old, %s): kept, %s\n", o.Key, humanAge(now.Sub(o.ModTime)), units.Bytes(o.Size), o.Reason)
	}
	for _, u := range rep.IncompleteUploads {
		fmt.Fprintf(out, "incomplete upload %s (started %s ago): %s\n", u.Key, humanAge(now.Sub(u.Initiated)), abort)
	}
	for _, b := range rep.Broken {
		fmt.Fprintf(out, "broken backup %s: %s (kept; prune never deletes a broken backup)\n", b.ID, b.Problem)
	}
	for _, k := range rep.Unreadable {
		fmt.Fprintf(out, "unreadable manifest %s: %s (damaged, truncated or of a newer format; kept, with its data object)\n", k, rep.UnreadableWhy[k])
	}
	printPrunedKits(out, rep)
	s := rep.Summary
	if rep.DryRun {
		fmt.Fprintf(out, "summary: %d backup(s): %d kept, %d to delete, %d locked, %d skipped; %d orphan(s) to remove; %d incomplete upload(s) to abort; %d broken\n",
			s.Backups, s.Kept, s.Delete, s.Locked, s.Skipped, s.Orphans, s.Uploads, s.Broken)
		if s.Generations > 0 || s.Markers > 0 {
			fmt.Fprintf(out, "changes: %d generation(s): %d kept, %d to delete; %d superseded progress marker(s) to remove\n",
				s.Generations, s.GenerationsKept, s.GenerationsDelete, s.Markers)
		}
		return
	}
	if s.Generations > 0 || s.Markers > 0 {
		defer fmt.Fprintf(out, "changes: %d generation(s): %d kept, %d deleted; %d superseded progress marker(s) removed\n",
			s.Generations, s.GenerationsKept, s.GenerationsDeleted, s.MarkersRemoved)
	}
	fmt.Fprintf(out, "summary: %d backup(s): %d kept, %d deleted, %d locked, %d skipped; %d orphan(s) removed; %d incomplete upload(s) aborted; %d broken; %d error(s)\n",
		s.Backups, s.Kept, s.Deleted, s.Locked, s.Skipped, s.OrphansRemoved, s.UploadsAborted, s.Broken, s.Errors)
}
