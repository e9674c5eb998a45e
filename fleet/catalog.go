package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"time"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Source is one store the fleet reads: every cluster under its root.
type Source struct {
	// Name says which store a cluster is in (its URL, without secrets).
	Name  string
	Store uploader.Store
	// Trust checks what is read (nil: nothing is checked): with trusted
	// keys, an object not signed by one is untrusted, that cluster's
	// problem.
	Trust *signing.Trust
}

// Cluster is what one cluster's place in a store says, as read; Assess
// judges it.
type Cluster struct {
	Store string `json:"store"`
	Name  string `json:"cluster"`
	// ReadError says why the cluster (or its whole store) could not be
	// read; the fields below are then what could be read before.
	ReadError string `json:"read_error,omitempty"`

	// IndexedAt is set when the cluster's backups were listed as its
	// agent's index written then says (plus what was stored after it):
	// damage or deletions behind the agent's back since are not seen by
	// this read (indexed.go); zero when every object was listed.
	IndexedAt time.Time `json:"indexed_at,omitzero"`

	// Backups counts intact backups; Broken those whose data object is
	// missing or of the wrong size; Unreadable the manifests that do not
	// parse; Untrusted the manifests not signed by a trusted key.
	Backups    int `json:"backups"`
	Broken     int `json:"broken,omitempty"`
	Unreadable int `json:"unreadable,omitempty"`
	Untrusted  int `json:"untrusted,omitempty"`
	// Lineages are the lineages of the trusted backups, the newest
	// backup's first; LineageError is set when they compete (no lineage
	// supersedes the others).
	Lineages     []string `json:"lineages,omitempty"`
	LineageError string   `json:"lineage_error,omitempty"`

	// Newest is the newest intact backup of the current lineage.
	Newest *Backup `json:"newest,omitempty"`
	// Recent are the creation times of the newest intact backups (up to
	// recentBackups), newest first: their spacing is the schedule when
	// no agent says it.
	Recent []time.Time `json:"-"`

	// Window is the newest generation's recoverable window (nil without
	// capture).
	Window *Window `json:"window,omitempty"`

	// History is every backup as listed (the newest historyBackups),
	// newest first, each with its newest drill; Windows every change
	// window of the current lineage, oldest first. The cluster's page
	// shows them; JSON leaves them out (a row per backup of every
	// cluster is not a status).
	History []BackupRow `json:"-"`
	Windows []Window    `json:"-"`

	// Drill is the newest drill of any backup; DrillStarts the start
	// times of the newest drills (up to recentBackups), newest first.
	Drill       *Drill      `json:"drill,omitempty"`
	DrillStarts []time.Time `json:"-"`
	// DrillUntrusted counts backups whose newest drill report is not
	// signed by a trusted key.
	DrillUntrusted int `json:"drill_untrusted,omitempty"`

	// Kit is the recovery kit the newest backup names (nil: none).
	Kit *Kit `json:"kit,omitempty"`

	// Agent is the newest status document of the cluster's agents (nil:
	// none, an older agent), with what it leaves empty filled from older
	// ones (mergeAgents: a CronJob per job each states its own); Agents
	// counts the agents that wrote one;
	// AgentErrors are the documents that could not be read or are
	// untrusted.
	Agent       *repository.AgentStatus `json:"agent,omitempty"`
	Agents      int                     `json:"agents,omitempty"`
	Leaders     int                     `json:"leaders,omitempty"`
	AgentErrors []string                `json:"agent_errors,omitempty"`
	// AgentUntrusted counts the agents whose newest document is not
	// signed by a trusted key (they are in AgentErrors too).
	AgentUntrusted int `json:"agent_untrusted,omitempty"`

	kitID string // the kit the newest backup names
	// work is agentWork of the agents' documents (Refresh's signal).
	work [32]byte
}

// Backup is a backup in the catalog.
type Backup struct {
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	Revision  int64     `json:"revision"`
	// RevisionTime is the time from which its state is the cluster's.
	RevisionTime time.Time `json:"revision_time"`
}

// BackupRow is one backup in a cluster's history.
type BackupRow struct {
	ID        string
	CreatedAt time.Time
	Revision  int64
	// State is repository.StateOK, StateBroken or StateUntrusted;
	// Problem says why when it is not ok.
	State, Problem string
	Lineage        string
	// Drill is the backup's newest drill (nil: none).
	Drill *Drill
}

// historyBackups bounds a cluster's History.
const historyBackups = 500

// Window is a generation's window in the catalog.
type Window struct {
	Generation  string    `json:"generation"`
	From        int64     `json:"from"`
	Through     int64     `json:"through"`
	FromTime    time.Time `json:"from_time"`
	ThroughTime time.Time `json:"through_time"`
	Recoverable bool      `json:"recoverable"`
	Sealed      bool      `json:"sealed,omitempty"`
	// Problem says why the window ends before its segments do, or why it
	// is not recoverable.
	Problem string `json:"problem,omitempty"`
	// AnchorNewest is true when the window starts at the newest backup.
	AnchorNewest bool `json:"-"`
}

// Drill is a drill in the catalog.
type Drill struct {
	BackupID string `json:"backup_id"`
	// State is repository.DrillPassed, DrillFailed or DrillUnknown.
	State    string    `json:"state"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished,omitzero"`
	// RTO is the measured recovery time.
	RTO   repository.Seconds `json:"rto_seconds,omitempty"`
	Error string             `json:"error,omitempty"`
}

// Kit is the recovery kit of the newest backup.
type Kit struct {
	ID string `json:"id"`
	// CertExpiry is the soonest expiry of its certificates (zero: none),
	// CertPath that certificate's file.
	CertExpiry time.Time `json:"cert_expiry,omitzero"`
	CertPath   string    `json:"cert_path,omitempty"`
	Error      string    `json:"error,omitempty"`
	// Untrusted is set when the kit's manifest is not signed by a
	// trusted key.
	Untrusted bool `json:"untrusted,omitempty"`
}

// recentBackups bounds the backups and drills whose spacing is kept.
const recentBackups = 7

// readers bounds the clusters read at once.
const readers = 4

// Read reads every cluster of every source. A source that cannot be
// listed is one row with its error (cluster "*"); only the end of ctx
// fails the call. Rows are sorted by store, then cluster.
func Read(ctx context.Context, sources []Source, lg *slog.Logger) ([]Cluster, error) {
	return NewReader().Read(ctx, sources, lg)
}

// readCluster reads one cluster: its backups and lineages, windows,
// drills, kit and agents. The first error ends the reading and is the
// row's ReadError.
func readCluster(ctx context.Context, st uploader.Store, src Source, name string, repo *repository.Repo) Cluster {
	c := Cluster{Store: src.Name, Name: name}
	if err := c.readBackups(ctx, repo); err != nil {
		c.ReadError = err.Error()
		return c
	}
	if err := c.readDrills(ctx, repo); err != nil {
		c.ReadError = err.Error()
		return c
	}
	if err := c.readAgents(ctx, repo); err != nil {
		c.ReadError = err.Error()
		return c
	}
	c.readKit(ctx, kit.Repo{Store: st, Cluster: name, Trust: src.Trust})
	return c
}

// readBackups reads the listing, lineages and windows.
func (c *Cluster) readBackups(ctx context.Context, repo *repository.Repo) error {
	l, err := repo.List(ctx)
	if err != nil {
		return fmt.Errorf("list backups of %s: %w", c.Name, err)
	}
	c.Unreadable = len(l.Unreadable)
	c.Untrusted = l.Untrusted()
	lineage := ""
	for i, g := range l.Lineages() {
		c.Lineages = append(c.Lineages, g.ID)
		if i == 0 {
			lineage = g.ID
		}
	}
	if cur, err := l.CurrentLineage(); err != nil {
		c.LineageError = err.Error()
	} else if cur != nil {
		lineage = cur.ID
	}
	for _, e := range l.Backups {
		if len(c.History) < historyBackups {
			m := e.Manifest
			c.History = append(c.History, BackupRow{ID: m.ID, CreatedAt: m.CreatedAt, Revision: m.Revision, State: e.State, Problem: e.Problem, Lineage: m.LineageID()})
		}
		switch e.State {
		case repository.StateBroken:
			c.Broken++
		case repository.StateOK:
			c.Backups++
			m := e.Manifest
			if m.LineageID() != lineage {
				continue
			}
			if c.Newest == nil {
				c.Newest = &Backup{ID: m.ID, CreatedAt: m.CreatedAt, Revision: m.Revision, RevisionTime: m.RevisionTime()}
				c.kitID = m.Kit
			}
			if len(c.Recent) < recentBackups {
				c.Recent = append(c.Recent, m.CreatedAt)
			}
		}
	}
	ws, err := repo.Windows(ctx, l)
	if err != nil {
		return fmt.Errorf("read the change windows of %s: %w", c.Name, err)
	}
	for _, w := range repository.OfLineage(ws, lineage) { // oldest first
		c.Windows = append(c.Windows, Window{Generation: w.Generation, From: w.From, Through: w.Through, FromTime: w.FromTime, ThroughTime: w.ThroughTime,
			Recoverable: w.Recoverable(), Sealed: w.Sealed, Problem: w.Problem,
			AnchorNewest: c.Newest != nil && w.Generation == c.Newest.ID})
	}
	if len(c.Windows) > 0 {
		w := c.Windows[len(c.Windows)-1]
		c.Window = &w
	}
	return nil
}

// readDrills finds the newest drill and the recent drills' starts.
func (c *Cluster) readDrills(ctx context.Context, repo *repository.Repo) error {
	drills, err := repo.LastDrills(ctx)
	if err != nil {
		return fmt.Errorf("read the drill reports of %s: %w", c.Name, err)
	}
	var newest *repository.LastDrill
	for _, d := range drills {
		if errors.Is(d.Err, repository.ErrUntrusted) {
			c.DrillUntrusted++
		}
		c.DrillStarts = append(c.DrillStarts, d.Started)
		if newest == nil || d.Started.After(newest.Started) {
			newest = d
		}
	}
	sort.Slice(c.DrillStarts, func(i, j int) bool { return c.DrillStarts[i].After(c.DrillStarts[j]) })
	if len(c.DrillStarts) > recentBackups {
		c.DrillStarts = c.DrillStarts[:recentBackups]
	}
	if newest != nil {
		c.Drill = drillOf(newest)
	}
	for i, b := range c.History {
		if d, ok := drills[b.ID]; ok {
			c.History[i].Drill = drillOf(d)
		}
	}
	return nil
}

// drillOf is a backup's newest drill in the catalog.
func drillOf(l *repository.LastDrill) *Drill {
	d := &Drill{State: l.State(), Started: l.Started}
	if l.DrillReport != nil {
		d.BackupID, d.Finished, d.RTO, d.Error = l.BackupID, l.FinishedAt, repository.Seconds(l.RecoverySeconds), l.DrillReport.Error
	} else {
		d.Error = l.Err.Error()
	}
	return d
}

// readAgents reads the newest status document of each agent.
func (c *Cluster) readAgents(ctx context.Context, repo *repository.Repo) error {
	es, err := repo.AgentStatuses(ctx)
	if err != nil {
		return fmt.Errorf("read the agent status of %s: %w", c.Name, err)
	}
	var docs []*repository.AgentStatus
	for _, e := range es { // the most recently written first
		if e.Err != nil {
			c.AgentErrors = append(c.AgentErrors, e.Err.Error())
			if errors.Is(e.Err, repository.ErrUntrusted) {
				c.AgentUntrusted++
			}
			continue
		}
		c.Agents++
		docs = append(docs, e.Status)
		if e.Status.Leader {
			c.Leaders++
		}
	}
	c.Agent = mergeAgents(docs)
	c.work = agentWork(es)
	return nil
}

// mergeWithin bounds how much older than the newest a document may be
// to fill in what the newest leaves empty: a daily drill CronJob's
// document still counts beside an hourly backup one.
const mergeWithin = 48 * time.Hour

// mergeAgents is the newest document (docs are newest first) with what
// it leaves empty — a job's schedule, its last run, stale_after,
// capture, copies — taken from the newest older document, written
// within mergeWithin, that has it. The Helm chart's CronJobs run one
// job each (the backup one with no drill schedule, the drill one with
// no snapshot schedule): together they state the cluster's promises.
// nil for no document.
func mergeAgents(docs []*repository.AgentStatus) *repository.AgentStatus {
	if len(docs) == 0 {
		return nil
	}
	m := *docs[0]
	m.Jobs = maps.Clone(m.Jobs)
	if m.Jobs == nil {
		m.Jobs = map[string]repository.AgentJob{}
	}
	for _, d := range docs[1:] {
		if m.WrittenAt.Sub(d.WrittenAt) > mergeWithin {
			break
		}
		fill := func(dst *string, src string) {
			if *dst == "" {
				*dst = src
			}
		}
		fill(&m.Schedules.Snapshot, d.Schedules.Snapshot)
		fill(&m.Schedules.Prune, d.Schedules.Prune)
		fill(&m.Schedules.Drill, d.Schedules.Drill)
		if m.StaleAfter == 0 {
			m.StaleAfter = d.StaleAfter
		}
		if m.Capture == nil {
			m.Capture = d.Capture
		}
		if len(m.Copies) == 0 {
			m.Copies = d.Copies
		}
		for name, j := range d.Jobs {
			if _, ok := m.Jobs[name]; !ok {
				m.Jobs[name] = j
			}
		}
	}
	return &m
}

// readKit reads the kit the newest backup names; what cannot be read is
// the kit's Error.
func (c *Cluster) readKit(ctx context.Context, kr kit.Repo) {
	if c.kitID == "" {
		return
	}
	k := &Kit{ID: c.kitID}
	c.Kit = k
	km, err := kr.Manifest(ctx, c.kitID)
	if err != nil {
		k.Error, k.Untrusted = err.Error(), errors.Is(err, signing.ErrUntrusted)
		return
	}
	for _, cert := range km.Certificates {
		if k.CertExpiry.IsZero() || cert.NotAfter.Before(k.CertExpiry) {
			k.CertExpiry, k.CertPath = cert.NotAfter, cert.Path
		}
	}
}
