package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
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
	ID    string `json:"id"`
	State string `json:"state"`
	// Lineage is the etcd cluster lineage the backup belongs to (the
	// founding cluster's ID; empty for an untrusted backup).
	Lineage  string               `json:"lineage,omitempty"`
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
	// Stores are the stores holding the backup intact, "primary" first
	// then copies by name; absent when no copies are configured.
	Stores []string `json:"stores,omitempty"`
}

type listOutput struct {
	Store      string         `json:"store"`
	Cluster    string         `json:"cluster"`
	Backups    []listedBackup `json:"backups"`
	Orphans    []string       `json:"orphans"`
	Unreadable []string       `json:"unreadable_manifests"`
	// Windows are the capture generations, oldest first: what a
	// point-in-time restore can reach.
	Windows []listedWindow `json:"windows"`
}

// listedWindow is one generation's window in `lifeboat list -o json`.
type listedWindow struct {
	Generation string `json:"generation"`
	// Recoverable: its anchor snapshot is an intact committed backup.
	Recoverable  bool      `json:"recoverable"`
	FromRevision int64     `json:"from_revision"`
	FromTime     time.Time `json:"from_time"`
	Through      int64     `json:"through_revision"`
	ThroughTime  time.Time `json:"through_time"`
	Segments     int       `json:"segments"`
	Sealed       bool      `json:"sealed"`
	SealReason   string    `json:"seal_reason,omitempty"`
	// Problem says why the window ends before the stored segments do,
	// or why it is not recoverable.
	Problem string `json:"problem,omitempty"`
	// Stray are objects of the generation outside its window.
	Stray []string `json:"stray"`
	// Damaged are the generation's segments proven damaged (damage
	// records), each "<key>: <what>".
	Damaged []string `json:"damaged"`
}

func windowRows(ws []repository.Window) []listedWindow {
	out := []listedWindow{}
	for _, w := range ws {
		lw := listedWindow{Generation: w.Generation, Recoverable: w.Recoverable(), FromRevision: w.From, FromTime: w.FromTime,
			Through: w.Through, ThroughTime: w.ThroughTime, Segments: len(w.Segments), Sealed: w.Sealed, SealReason: w.SealReason,
			Problem: w.Problem, Stray: []string{}, Damaged: []string{}}
		for _, d := range w.Damaged {
			lw.Damaged = append(lw.Damaged, d.Object+": "+d.Error)
		}
		for _, o := range w.Stray {
			lw.Stray = append(lw.Stray, o.Key)
		}
		out = append(out, lw)
	}
	return out
}

// state is a window's STATE column.
func (w listedWindow) state() string {
	var s string
	switch {
	case !w.Recoverable:
		s = "NOT RECOVERABLE"
	case len(w.Damaged) > 0:
		s = "DAMAGED"
	case w.Sealed && w.SealReason != "":
		s = "sealed (" + w.SealReason + ")"
	case w.Sealed:
		s = "sealed"
	default:
		s = "open"
	}
	if w.Problem != "" {
		s += ": " + w.Problem
	}
	if n := len(w.Stray); n > 0 {
		s += fmt.Sprintf("; %d object(s) outside the window (lifeboat verify --changes)", n)
	}
	return s
}

// listing is what `lifeboat list` shows: the primary's backups, their
// last drills, the capture windows and, with copies, which stores hold
// each backup.
type listing struct {
	store   string
	l       *repository.Listing
	drills  map[string]*repository.LastDrill
	windows []listedWindow
	stores  map[string][]string
	// others says which clusters the store holds when this one has no backup.
	others string
}

func runList(ctx context.Context, cfg *Config, lg *slog.Logger, o listOptions, out io.Writer, now time.Time) error {
	li, err := readListing(ctx, cfg, lg)
	if err != nil {
		return err
	}
	if o.output == "json" {
		return writeListJSON(out, cfg, li)
	}
	writeBackupTable(out, cfg, li, now)
	writeListNotes(out, li)
	writeWindowTable(out, li.windows)
	return nil
}

// readListing reads the store: its backups, their drill reports, the
// capture windows and the copies.
func readListing(ctx context.Context, cfg *Config, lg *slog.Logger) (*listing, error) {
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	l, err := backups.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("list backups: %w", err)
	}
	drills, err := backups.LastDrills(ctx)
	if err != nil {
		return nil, fmt.Errorf("list drill reports: %w", err)
	}
	ws, err := backups.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("list capture windows: %w", err)
	}
	li := &listing{store: backups.Store.String(), l: l, drills: drills, windows: windowRows(ws), stores: storesOf(ctx, cfg, l, lg)}
	if len(l.Backups) == 0 {
		li.others = backups.OtherClusters(ctx)
	}
	return li, nil
}

// writeListJSON writes `lifeboat list -o json`.
func writeListJSON(out io.Writer, cfg *Config, li *listing) error {
	res := listOutput{Store: li.store, Cluster: cfg.Cluster, Backups: []listedBackup{}, Orphans: []string{}, Unreadable: []string{}, Windows: li.windows}
	for _, e := range li.l.Backups {
		lb := listedBackup{ID: e.Manifest.ID, State: e.State, Problem: e.Problem, Manifest: e.Manifest, Stores: li.stores[e.Manifest.ID]}
		if e.State != repository.StateUntrusted {
			lb.Lineage = e.Manifest.LineageID()
		}
		d := li.drills[e.Manifest.ID]
		lb.DrillState = d.State()
		if d != nil {
			lb.LastDrill = d.DrillReport
			if d.Err != nil {
				lb.DrillError = d.Err.Error()
			}
		}
		res.Backups = append(res.Backups, lb)
	}
	for _, o := range li.l.Orphans {
		res.Orphans = append(res.Orphans, o.Key)
	}
	for _, o := range li.l.Unreadable {
		res.Unreadable = append(res.Unreadable, o.Key)
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(res)
}

// writeBackupTable writes the table of backups, newest first, or says
// there are none.
func writeBackupTable(out io.Writer, cfg *Config, li *listing, now time.Time) {
	if len(li.l.Backups) == 0 {
		fmt.Fprintf(out, "no backups of cluster %q in %s%s\n", cfg.Cluster, li.store, li.others)
		return
	}
	lineages := li.l.Lineages()
	if len(lineages) <= 1 {
		writeBackupRows(out, li, li.l.Backups, now)
		return
	}
	// Two lineages or more: each apart, the one latest chooses first.
	cur, curErr := li.l.CurrentLineage()
	for _, g := range lineages {
		role := "superseded"
		switch {
		case curErr != nil:
			role = "competing: restore latest refuses to choose, give --lineage " + g.ID
		case g.ID == cur.ID:
			role = "current"
		}
		fmt.Fprintf(out, "lineage %s (etcd cluster %s), %s:\n", g.ID, strings.Join(g.ClusterIDs, ", "), role)
		var rows []repository.Entry
		for _, e := range li.l.Backups {
			if e.State != repository.StateUntrusted && e.Manifest.LineageID() == g.ID {
				rows = append(rows, e)
			}
		}
		writeBackupRows(out, li, rows, now)
	}
	var untrusted []repository.Entry
	for _, e := range li.l.Backups {
		if e.State == repository.StateUntrusted {
			untrusted = append(untrusted, e)
		}
	}
	if len(untrusted) > 0 {
		fmt.Fprintln(out, "untrusted (not signed by a trusted key):")
		writeBackupRows(out, li, untrusted, now)
	}
}

// writeBackupRows writes one table of backups.
func writeBackupRows(out io.Writer, li *listing, rows []repository.Entry, now time.Time) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	head := "ID\tAGE\tREVISION\tKEYS\tDB SIZE\tSTORED\tENCRYPTED\tSTATE\tLAST DRILL"
	if li.stores != nil {
		head += "\tSTORES"
	}
	fmt.Fprintln(tw, head)
	for _, e := range rows {
		m := e.Manifest
		state := e.State
		if e.Problem != "" {
			state += ": " + e.Problem
		}
		enc := "no"
		if m.Encryption != "none" {
			enc = m.Encryption
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s", m.ID, humanAge(now.Sub(m.CreatedAt)), m.Revision, m.TotalKeys, units.Bytes(m.DBSize), units.Bytes(m.ObjectSize), enc, state, drillVerdict(li.drills[m.ID], now))
		if li.stores != nil {
			fmt.Fprintf(tw, "\t%s", strings.Join(li.stores[m.ID], ","))
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
}

// writeListNotes writes what is in the store but is not a backup (orphans,
// unreadable manifests) and the drills whose last report cannot be read.
func writeListNotes(out io.Writer, li *listing) {
	objects := map[string]string{} // unreadable manifest -> its data object
	n := 0
	for _, o := range li.l.Orphans {
		if mk, _, ok := li.l.UnreadableManifestOf(o.Key); ok {
			objects[mk] = o.Key
			continue
		}
		n++
	}
	if n > 0 {
		fmt.Fprintf(out, "%d data object(s) without a manifest (unfinished uploads; not backups; prune removes them)\n", n)
	}
	for _, u := range li.l.Unreadable {
		fmt.Fprintf(out, "unreadable manifest %s: %s (damaged, truncated or of a newer format: not a backup until it is repaired", u.Key, li.l.UnreadableWhy[u.Key])
		if o, ok := objects[u.Key]; ok {
			fmt.Fprintf(out, "; its data object %s is kept, prune never removes it", o)
		}
		fmt.Fprintln(out, ")")
	}
	writeDamageNotes(out, li.l.Damage)
	if n := li.l.Untrusted(); n > 0 {
		fmt.Fprintf(out, "%d untrusted backup(s): not signed by a trusted key, so someone without this cluster's signing key wrote them to the store; never restored, drilled, copied or counted by prune (docs/security.md)\n", n)
	}
	for _, e := range li.l.Backups {
		if e.State != repository.StateUntrusted && e.Manifest.Unsigned() {
			fmt.Fprintf(out, "unsigned backup %s read because signing.allow_unsigned is set: its origin is not proven\n", e.Manifest.ID)
		}
	}
	for _, e := range li.l.Backups {
		if d := li.drills[e.Manifest.ID]; d.State() == repository.DrillUnknown {
			fmt.Fprintf(out, "last drill of %s unknown: %v\n", e.Manifest.ID, d.Err)
		}
	}
}

// writeWindowTable writes the capture windows, if any.
func writeWindowTable(out io.Writer, windows []listedWindow) {
	if len(windows) == 0 {
		return
	}
	fmt.Fprintln(out, "\ncapture windows (point-in-time restore: --to-revision or --to-time inside one):")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GENERATION\tFROM\tTHROUGH\tSEGMENTS\tSTATE")
	for _, w := range windows {
		fmt.Fprintf(tw, "%s\t%d %s\t%d %s\t%d\t%s\n", w.Generation, w.FromRevision, w.FromTime.UTC().Format(time.RFC3339),
			w.Through, w.ThroughTime.UTC().Format(time.RFC3339), w.Segments, w.state())
	}
	tw.Flush()
}

// storesOf lists every configured copy and says, per backup of the
// primary listing l, which stores hold it intact ("primary" first). nil
// without copies. A copy that cannot be listed is logged and left out:
// list still shows the primary.
func storesOf(ctx context.Context, cfg *Config, l *repository.Listing, lg *slog.Logger) map[string][]string {
	if len(cfg.Copies) == 0 {
		return nil
	}
	out := map[string][]string{}
	for _, e := range l.Backups {
		if e.State == repository.StateOK {
			out[e.Manifest.ID] = []string{storePrimary}
		}
	}
	copies, err := openCopies(ctx, cfg, lg)
	if err != nil {
		lg.Warn("list: cannot open the copies; STORES shows the primary only", "err", err)
		return out
	}
	for _, cs := range copies {
		cl, err := cs.repo.List(ctx)
		if err != nil {
			lg.Warn("list: cannot list a copy; STORES leaves it out", "store", cs.cfg.Name, "err", err)
			continue
		}
		for _, e := range cl.Backups {
			if e.State == repository.StateOK {
				out[e.Manifest.ID] = append(out[e.Manifest.ID], cs.cfg.Name)
			}
		}
	}
	return out
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
	// A point-in-time drill proved (or failed) the snapshot and its
	// changes up to a revision: say which.
	pitr := ""
	if r.PointInTime != nil {
		pitr = fmt.Sprintf(" to r%d", r.PointInTime.TargetRevision)
	}
	if r.Passed {
		return fmt.Sprintf("passed%s %s ago (%.1fs)", pitr, humanAge(now.Sub(r.FinishedAt)), r.RecoverySeconds)
	}
	return fmt.Sprintf("FAILED%s %s ago", pitr, humanAge(now.Sub(r.FinishedAt)))
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

// writeDamageNotes names the damage records that mark nothing themselves:
// untrusted and unreadable ones (backups and windows show the others).
func writeDamageNotes(out io.Writer, d *repository.DamageRecords) {
	if d == nil {
		return
	}
	for _, r := range d.Current {
		if r.Untrusted != "" {
			fmt.Fprintf(out, "untrusted damage record %s (%s): it says %s\n", r.Key, r.Untrusted, r.String())
		}
	}
	for _, o := range d.Unreadable {
		fmt.Fprintf(out, "unreadable damage record %s: some object was found damaged; lifeboat verify and verify --changes say which\n", o.Key)
	}
}
