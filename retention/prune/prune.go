package prune

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Job applies a retention policy to one cluster's backups and cleans
// up what failed uploads and interrupted prunes left behind.
type Job struct {
	// Backups is the cluster's backup area.
	Backups *repository.Repo
	// Policy says which backups to keep; it must be valid (an empty policy
	// is an error, never "delete everything").
	Policy retention.Policy
	// OrphanGrace is how old a data object without a manifest, a drill
	// report without a backup, or an incomplete multipart upload must be
	// before it is removed: by the store's time (modification, initiation)
	// and by the time its backup id names, both. It keeps prune away from
	// uploads that are still running; see MinOrphanGrace.
	OrphanGrace time.Duration
	// SnapshotRunning, when set, reports whether a snapshot of the cluster
	// is in flight (the agent's snapshot job). While it is, no orphan is
	// removed and no upload aborted: they are reported kept.
	SnapshotRunning func() bool
	// DryRun plans and reports but changes nothing.
	DryRun bool
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// DrillPassed maps a backup id to whether its last drill passed; ids
	// not in it (or a nil map) count as not proven. The newest proven
	// backup is never deleted.
	DrillPassed map[string]bool
	// DrillUnknown holds the ids whose last drill's verdict cannot be read
	// (an unreadable report): such a backup is kept when it is newer than
	// the newest proven one, since it may be that one.
	DrillUnknown map[string]bool
}

// Action is what prune does with a backup.
type Action string

// Actions.
const (
	// ActionKeep: a rule or guarantee keeps the backup.
	ActionKeep Action = "keep"
	// ActionDelete: no rule keeps it; it is (or, in a dry run, would be)
	// deleted.
	ActionDelete Action = "delete"
	// ActionLocked: no rule keeps it, but Object Lock retention or a legal
	// hold (as the store reports it: never taken from the manifest) forbids
	// deleting it now. It is left for a later run.
	ActionLocked Action = "locked"
	// ActionSkip: it was to be deleted, but a check before deleting failed
	// (see Problem); it is left alone this run.
	ActionSkip Action = "skip"
)

// PlannedBackup is the plan for one backup whose data object is present.
type PlannedBackup struct {
	// Decision is the retention policy's verdict, with the rules that keep it.
	Decision retention.Decision
	// Entry is the backup as listed.
	Entry repository.Entry
	// Action is what prune does with it.
	Action Action
	// Problem says why, for ActionSkip.
	Problem string
}

// KeptObject is an object prune could clean up but leaves, and why.
type KeptObject struct {
	Object uploader.ObjectInfo
	Reason string
}

// Plan is what a prune run found and decided.
type Plan struct {
	// Now is the time the plan was made for.
	Now time.Time
	// Backups are the backups with their data object (state ok), newest
	// first. Only these take part in the retention policy.
	Backups []PlannedBackup
	// Broken are backups whose manifest names a data object that is
	// missing or of the wrong size. Prune never deletes them: they need a
	// human (list and verify show them too).
	Broken []repository.Entry
	// Untrusted are backups whose manifest is not signed by a trusted
	// key: not this cluster's. Prune neither counts nor deletes them
	// (evidence for whoever investigates; list and the untrusted-objects
	// alert name them).
	Untrusted []repository.Entry
	// Unreadable are manifests that cannot be parsed (perhaps written by a
	// newer version). They, their data objects and their drill reports are
	// left alone.
	Unreadable []uploader.ObjectInfo
	// UnreadableWhy says why each of Unreadable could not be read, by key.
	UnreadableWhy map[string]string
	// Orphans are objects that belong to no backup and are older than the
	// grace period: data objects without a manifest, drill reports of
	// backups that no longer exist, damage records whose object is gone
	// or was replaced (repository.DamageRecords.Obsolete). They are
	// removed.
	Orphans []uploader.ObjectInfo
	// OrphansKept are orphans left in place: younger than the grace period,
	// locked, or belonging to an unreadable manifest.
	OrphansKept []KeptObject
	// IncompleteUploads are multipart uploads of this cluster older than the
	// grace period (only for stores that can list them). They are aborted.
	IncompleteUploads []uploader.IncompleteUpload
	// Generations are the capture generations with a committed anchor,
	// oldest first, each with its verdict (Policy.ChangesWithin). The
	// objects of generations without one are orphans (Orphans or
	// OrphansKept), sorted by the same grace.
	Generations []PlannedGeneration
	// Markers are superseded progress markers (not the newest of their
	// generation, not sealed) older than the grace period: removed.
	Markers []uploader.ObjectInfo
	// Kits are the recovery kits, each kept while a backup that stays
	// names it (see planKits).
	Kits []PlannedKit

	listing *repository.Listing // what the plan was made from (applyKits)
}

// PlannedGeneration is the plan for one generation's change segments
// and progress markers.
type PlannedGeneration struct {
	Window   repository.Window
	Decision retention.GenerationDecision
	// Action is keep, delete, skip (see Problem), or locked: the store
	// still locks one of its objects (Problem names it).
	Action  Action
	Problem string
	// Delete lists what goes, in order, for ActionDelete: the progress
	// markers, then the segments from the newest down, then the stray
	// objects. Every state a crash can leave is a shorter window of the
	// same generation, never one whose markers vouch for missing segments.
	Delete []uploader.ObjectInfo
}

// Result is what a prune run did.
type Result struct {
	Plan *Plan
	// Deleted are the ids of the backups whose manifest, data object and
	// drill reports were all deleted (none in a dry run).
	Deleted []string
	// Locked are the ids of backups the policy would delete but Object
	// Lock keeps for now.
	Locked []string
	// OrphansRemoved and UploadsAborted count the cleanup done.
	OrphansRemoved int
	UploadsAborted int
	// Broken counts backups whose data object is missing or wrong.
	Broken int
	// Untrusted counts backups not signed by a trusted key (kept).
	Untrusted int
	// Generations are the ids of the generations whose segments and
	// markers were all deleted; ChangeObjectsRemoved counts those objects
	// and MarkersRemoved the superseded markers removed.
	Generations          []string
	ChangeObjectsRemoved int
	MarkersRemoved       int
	// KitsDeleted are the ids of the recovery kits deleted.
	KitsDeleted []string
	// LockPending counts the generations, kits and superseded markers
	// that no rule keeps but the store still locks (by its Stat): they
	// wait for a later run, which is not an error.
	LockPending int
	// Errors are the problems met; each concerns one backup or object and
	// did not stop the others.
	Errors []error
}

// Retry backoff of the agent's snapshot job, which MinOrphanGrace counts.
const (
	// DefaultRetryBackoff is the first delay between snapshot attempts.
	DefaultRetryBackoff = 10 * time.Second
	// MaxRetryBackoff caps the doubling delay.
	MaxRetryBackoff = 5 * time.Minute
	// UnboundedOrphanGrace is the floor of the grace when snapshots have
	// no timeout (the default grace).
	UnboundedOrphanGrace = 24 * time.Hour
)

// MinOrphanGrace is the smallest orphan grace that keeps prune away from
// the objects of snapshots still running: the longest a snapshot job can
// run, (retries + 1) × timeout plus the backoff between attempts (backoff
// doubling from firstBackoff, DefaultRetryBackoff when 0, up to
// MaxRetryBackoff). An attempt's objects are never older than that, by
// their id's time or the store's. With no timeout (0) there is no bound
// and the floor is UnboundedOrphanGrace. It assumes the clocks of the hosts
// that snapshot and prune, and the store's, agree (NTP); add any skew.
func MinOrphanGrace(timeout time.Duration, retries int, firstBackoff time.Duration) time.Duration {
	if timeout <= 0 {
		return UnboundedOrphanGrace
	}
	if firstBackoff <= 0 {
		firstBackoff = DefaultRetryBackoff
	}
	floor := time.Duration(retries+1) * timeout
	for d, i := firstBackoff, 0; i < retries; i++ {
		floor += min(d, MaxRetryBackoff)
		d *= 2
	}
	return floor
}

// incompleteUploadStore is implemented by stores that can find and abort
// multipart uploads that were never completed (uploader.S3).
type incompleteUploadStore interface {
	ListIncompleteUploads(ctx context.Context, olderThan time.Time) ([]uploader.IncompleteUpload, error)
	AbortIncomplete(ctx context.Context, key, uploadID string) error
}

// Run plans and, unless job.DryRun, applies the retention policy.
//
// Only backups whose data object is present take part in the policy;
// broken ones are reported and kept. A backup is never deleted while it is
// locked: by the lock a Stat of its data object or manifest reports
// before anything of the backup is touched (the writer's lock, bucket
// default retention, a legal hold set later), never by the lock fields
// of its manifest, which on a copy are the primary's. Orphans,
// generations, kits, superseded markers and drill reports are Stat-ed
// too; what is still locked waits for a later run (Result.LockPending).
//
// A backup is deleted in a safe order: its manifest first, so it stops
// being listed, then its data object, then its drill reports. A crash or an
// error between the steps leaves only orphans, which a later run removes
// once they are older than the grace period; never a listed backup without
// data.
//
// Change segments and progress markers follow Policy.ChangesWithin
// (retention.PlanChanges): generations are deleted whole, oldest first
// and before their anchor; a retained generation's anchor is kept; see
// planGenerations. No key a restore or drill of this process holds
// (repository.Held) is deleted.
//
// An error with one backup or object does not stop the others; they are
// collected in Result.Errors and make Run return an error at the
// end, together with the result. Failing to list the store, or an invalid
// policy, returns a nil result.
func Run(ctx context.Context, job Job, lg *slog.Logger) (*Result, error) {
	if job.Backups == nil {
		return nil, errors.New("prune: no backup store")
	}
	if job.OrphanGrace < 0 {
		// A negative grace would make every orphan, and every upload
		// still running, old enough to remove.
		return nil, fmt.Errorf("prune: orphan grace %s: must not be negative", job.OrphanGrace)
	}
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if job.Now != nil {
		now = job.Now
	}
	p := &pruner{job: job, b: job.Backups, now: now()}
	plan, err := p.plan(ctx)
	if err != nil {
		return nil, err
	}
	res := &Result{Plan: plan, Broken: len(plan.Broken), Untrusted: len(plan.Untrusted), Errors: p.errs}
	for _, pb := range plan.Backups {
		if pb.Action == ActionLocked {
			res.Locked = append(res.Locked, pb.Entry.Manifest.ID)
		}
	}
	if !job.DryRun {
		p.apply(ctx, res, lg)
		res.Errors = p.errs
		if len(res.Deleted) > 0 {
			p.reindex(ctx, lg)
		}
	}
	res.LockPending = p.pending
	if len(res.Errors) > 0 {
		return res, fmt.Errorf("prune cluster %q in %s: %d problem(s): %w", p.b.Cluster, p.b.Store, len(res.Errors), errors.Join(res.Errors...))
	}
	if res.LockPending > 0 {
		lg.Info("objects no rule keeps wait for their Object Lock to run out", "cluster", p.b.Cluster, "pending", res.LockPending)
	}
	lg.Info("prune done", "cluster", p.b.Cluster, "dry_run", job.DryRun, "backups", len(plan.Backups),
		"deleted", len(res.Deleted), "locked", len(res.Locked), "orphans_removed", res.OrphansRemoved,
		"uploads_aborted", res.UploadsAborted, "broken", res.Broken, "untrusted", res.Untrusted)
	return res, nil
}

// reindex writes a new index of the cluster when it has one (its
// agent keeps it, repository.Index): the one listing the deleted
// backups would otherwise stand until the agent's next job. A failure
// is logged: the index is a reader's shortcut, prune's work is done.
func (p *pruner) reindex(ctx context.Context, lg *slog.Logger) {
	has, err := p.b.HasIndex(ctx)
	if err == nil && has {
		_, err = (&repository.Indexer{Repo: p.b, Writer: "lifeboat prune"}).Write(ctx, p.now)
	}
	if err != nil {
		lg.Warn("cannot write the cluster's backup index after prune; a fleet reading it cold may count deleted backups until the agent's next job",
			"cluster", p.b.Cluster, "err", err)
	}
}

type pruner struct {
	job  Job
	b    *repository.Repo
	now  time.Time
	errs []error
	// pending counts what waits for its Object Lock (Result.LockPending).
	pending int
}

// lockedKey returns the first of keys the store still locks at p.now (by
// its Stat), "" when none is.
func (p *pruner) lockedKey(ctx context.Context, keys ...string) (string, error) {
	for _, k := range keys {
		locked, err := repository.LockedNow(ctx, p.b.Store, k, p.now)
		if err != nil {
			return "", err
		}
		if locked {
			return k, nil
		}
	}
	return "", nil
}

func (p *pruner) fail(err error) { p.errs = append(p.errs, err) }

// plan lists the store and decides. Per-object problems are collected in
// p.errs; only a failed listing or an invalid policy is returned.
func (p *pruner) plan(ctx context.Context) (*Plan, error) {
	if err := p.job.Policy.Validate(); err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	l, err := p.b.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("prune: list backups of cluster %q in %s: %w", p.b.Cluster, p.b.Store, err)
	}
	plan := &Plan{Now: p.now, Unreadable: l.Unreadable, UnreadableWhy: l.UnreadableWhy}

	known, claims, ok := sortEntries(l, plan)
	in, byID := p.retentionInput(ok)
	windows, err := p.b.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	decisions, genDecisions, err := retention.PlanChanges(in, generations(windows), p.job.Policy, p.now)
	if err != nil {
		return nil, fmt.Errorf("prune: %w", err)
	}
	if err := p.planBackups(ctx, plan, decisions, byID, claims); err != nil {
		return nil, err
	}
	p.planGenerations(ctx, plan, windows, genDecisions, known)

	for _, o := range l.Orphans {
		if known[idOf(o.Key)] {
			reason := "its manifest is unreadable"
			if mk, why, ok := l.UnreadableManifestOf(o.Key); ok {
				reason = "its manifest " + mk + " is unreadable (" + why + "): not an unfinished upload, never removed"
			}
			plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, reason})
			continue
		}
		p.planOrphan(ctx, plan, o)
	}
	if l.Damage != nil {
		// Damage records whose object is gone or was replaced: removed
		// like orphans (after the grace period, unless locked).
		for _, o := range l.Damage.Obsolete {
			p.planOrphan(ctx, plan, o)
		}
	}
	if err := p.planDrillOrphans(ctx, plan, known); err != nil {
		return nil, err
	}
	plan.listing = l
	if err := p.planKits(ctx, plan, l); err != nil {
		return nil, err
	}
	if err := p.planUploads(ctx, plan); err != nil {
		p.fail(err)
	}
	return plan, nil
}

// sortEntries sorts the listing's backups: the ok ones, returned, and
// the broken ones, in plan.Broken. It returns the ids that are, or may
// be, backups (known: their objects and drill reports are never
// orphans), and how many manifests name each data object (claims: one
// shared by two manifests, a hand-made copy, must not go with the first).
func sortEntries(l *repository.Listing, plan *Plan) (known map[string]bool, claims map[string]int, ok []repository.Entry) {
	known = map[string]bool{}
	for _, u := range l.Unreadable {
		known[idOf(u.Key)] = true
	}
	claims = map[string]int{}
	for _, e := range l.Backups {
		known[e.Manifest.ID] = true
		claims[e.Manifest.Object]++
		switch e.State {
		case repository.StateOK:
			ok = append(ok, e)
		case repository.StateUntrusted:
			plan.Untrusted = append(plan.Untrusted, e)
		default:
			plan.Broken = append(plan.Broken, e)
		}
	}
	return known, claims, ok
}

// retentionInput is the ok backups as the policy sees them, and the
// entries by id.
func (p *pruner) retentionInput(ok []repository.Entry) ([]retention.Backup, map[string]repository.Entry) {
	in := make([]retention.Backup, len(ok))
	byID := make(map[string]repository.Entry, len(ok))
	for i, e := range ok {
		m := e.Manifest
		in[i] = retention.Backup{
			ID:           m.ID,
			Time:         m.CreatedAt,
			Size:         e.Object.Size,
			DrillPassed:  p.job.DrillPassed[m.ID] && !p.job.DrillUnknown[m.ID],
			DrillUnknown: p.job.DrillUnknown[m.ID],
			// Not the manifest's lock fields: they say what the
			// primary's writer asked for, and a copy's objects may be
			// locked otherwise (issue 28). checkDelete asks the store.
			Locked: e.Object.Locked(p.now),
			State:  m.State(),
		}
		byID[m.ID] = e
	}
	return in, byID
}

// generations is the change windows with an anchor, as the policy sees
// them.
func generations(windows []repository.Window) []retention.Generation {
	var gens []retention.Generation
	for _, w := range windows {
		if w.Anchor != nil {
			gens = append(gens, retention.Generation{ID: w.Generation, End: w.ThroughTime})
		}
	}
	return gens
}

// planBackups turns the policy's decisions into the plan's backups and
// their actions: kept, locked, or deleted when checkDelete allows it.
func (p *pruner) planBackups(ctx context.Context, plan *Plan, decisions []retention.Decision, byID map[string]repository.Entry, claims map[string]int) error {
	plan.Backups = make([]PlannedBackup, len(decisions))
	for i, d := range decisions {
		pb := PlannedBackup{Decision: d, Entry: byID[d.Backup.ID], Action: ActionKeep}
		switch {
		case d.Keep && len(d.Reasons) == 1 && d.Reasons[0] == "locked":
			pb.Action = ActionLocked
		case !d.Keep:
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("prune: %w", err)
			}
			pb.Action, pb.Problem = p.checkDelete(ctx, pb.Entry, claims)
		}
		plan.Backups[i] = pb
	}
	return nil
}

// checkDelete decides whether backup e, which no rule keeps, can be
// deleted now.
func (p *pruner) checkDelete(ctx context.Context, e repository.Entry, claims map[string]int) (Action, string) {
	m := e.Manifest
	if dir := path.Join(p.b.Cluster, "snapshots") + "/"; !strings.HasPrefix(m.Object, dir) || strings.Contains(m.Object[len(dir):], "/") {
		p.fail(fmt.Errorf("backup %s: manifest names data object %s outside %s: not deleted", m.ID, m.Object, dir))
		return ActionSkip, "data object outside the cluster's snapshots"
	}
	if claims[m.Object] > 1 {
		p.fail(fmt.Errorf("backup %s: data object %s is named by %d manifests: not deleted", m.ID, m.Object, claims[m.Object]))
		return ActionSkip, "data object shared with another manifest"
	}
	if k := heldKey(p.b.ManifestKey(m.ID), m.Object); k != "" {
		return ActionSkip, "held: a restore or drill of this process is reading " + k
	}
	// The manifest must be where the next run would look for it, or
	// deleting "it" would leave a listed backup without data.
	mi, err := p.b.Store.Stat(ctx, p.b.ManifestKey(m.ID))
	if err != nil {
		p.fail(fmt.Errorf("backup %s: stat manifest: %w", m.ID, err))
		return ActionSkip, "manifest not found at " + p.b.ManifestKey(m.ID)
	}
	info, err := p.b.Store.Stat(ctx, m.Object)
	switch {
	case errors.Is(err, uploader.ErrNotFound):
		// Gone since the listing: the backup is broken now, and broken
		// backups are for a human to look at.
		p.fail(fmt.Errorf("backup %s: data object %s vanished while pruning: not deleted", m.ID, m.Object))
		return ActionSkip, "data object vanished"
	case err != nil:
		p.fail(fmt.Errorf("backup %s: check lock of %s: %w", m.ID, m.Object, err))
		return ActionSkip, "lock state unknown"
	case info.Locked(p.now), mi.Locked(p.now):
		return ActionLocked, ""
	}
	return ActionDelete, ""
}

// planOrphan sorts an orphaned object into remove or keep.
func (p *pruner) planOrphan(ctx context.Context, plan *Plan, o uploader.ObjectInfo) {
	if repository.Held(o.Key) {
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "held by a restore or drill of this process"})
		return
	}
	if p.young(o.Key, o.ModTime) {
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "younger than the grace period"})
		return
	}
	if p.snapshotRunning() {
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "a snapshot is in flight"})
		return
	}
	// Listings do not carry lock state: ask.
	info, err := p.b.Store.Stat(ctx, o.Key)
	switch {
	case errors.Is(err, uploader.ErrNotFound):
		return // removed meanwhile
	case err != nil:
		p.fail(fmt.Errorf("orphan %s: check lock: %w", o.Key, err))
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "lock state unknown"})
	case info.Locked(p.now):
		plan.OrphansKept = append(plan.OrphansKept, KeptObject{o, "locked"})
	default:
		plan.Orphans = append(plan.Orphans, o)
	}
}

// young reports whether an object stored at storeTime is within the grace
// period: by the store's time, or by the time of the backup id its key
// names (a snapshot's objects carry its start time from the first byte).
func (p *pruner) young(key string, storeTime time.Time) bool {
	if p.now.Sub(storeTime) < p.job.OrphanGrace {
		return true
	}
	t, ok := keyIDTime(key)
	return ok && p.now.Sub(t) < p.job.OrphanGrace
}

func (p *pruner) snapshotRunning() bool {
	return p.job.SnapshotRunning != nil && p.job.SnapshotRunning()
}

// keyIDTime returns the time of the backup id a key names: its base name
// up to the first dot (snapshots/<id>.db…), else the directory of a drill
// report (drills/<id>/<time>.json).
func keyIDTime(key string) (time.Time, bool) {
	if t, ok := repository.IDTime(idOf(key)); ok {
		return t, true
	}
	return repository.IDTime(path.Base(path.Dir(key)))
}

// planDrillOrphans finds drill reports of backups that do not exist (left
// by a prune interrupted after the data object was deleted).
func (p *pruner) planDrillOrphans(ctx context.Context, plan *Plan, known map[string]bool) error {
	dir := path.Join(p.b.Cluster, "drills") + "/"
	var stray []uploader.ObjectInfo
	err := p.b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		id, _, _ := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		if !known[id] {
			stray = append(stray, o)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("prune: list drill reports of cluster %q in %s: %w", p.b.Cluster, p.b.Store, err)
	}
	for _, o := range stray {
		p.planOrphan(ctx, plan, o)
	}
	return nil
}

// planUploads lists this cluster's incomplete multipart uploads older than
// the grace period, when the store can.
func (p *pruner) planUploads(ctx context.Context, plan *Plan) error {
	s, ok := p.b.Store.(incompleteUploadStore)
	if !ok {
		return nil
	}
	ups, err := s.ListIncompleteUploads(ctx, p.now.Add(-p.job.OrphanGrace))
	if err != nil {
		return err
	}
	prefix := path.Join(p.b.Cluster) + "/"
	for _, u := range ups {
		if !strings.HasPrefix(u.Key, prefix) || p.young(u.Key, u.Initiated) {
			continue
		}
		if p.snapshotRunning() {
			plan.OrphansKept = append(plan.OrphansKept, KeptObject{uploader.ObjectInfo{Key: u.Key, ModTime: u.Initiated}, "incomplete upload kept: a snapshot is in flight"})
			continue
		}
		plan.IncompleteUploads = append(plan.IncompleteUploads, u)
	}
	return nil
}

// apply carries out the plan: generations first (oldest first), then
// backups, so that an anchor goes only after its generation's segments;
// an anchor whose generation could not be deleted stays.
func (p *pruner) apply(ctx context.Context, res *Result, lg *slog.Logger) {
	failed := p.applyChanges(ctx, res, lg)
	for _, pb := range res.Plan.Backups {
		if pb.Action != ActionDelete {
			continue
		}
		switch failed[pb.Entry.Manifest.ID] {
		case genFailed:
			p.fail(fmt.Errorf("backup %s: not deleted: its generation's change segments could not all be deleted", pb.Entry.Manifest.ID))
			continue
		case genHeld:
			lg.Info("backup kept for now: its generation is held by a restore or drill", "backup_id", pb.Entry.Manifest.ID)
			continue
		}
		if k := heldKey(p.b.ManifestKey(pb.Entry.Manifest.ID), pb.Entry.Manifest.Object); k != "" {
			lg.Info("backup kept for now: held by a restore or drill", "backup_id", pb.Entry.Manifest.ID, "key", k)
			continue
		}
		if err := ctx.Err(); err != nil {
			p.fail(fmt.Errorf("prune stopped: %w", err))
			return
		}
		id := pb.Entry.Manifest.ID
		if err := p.deleteBackup(ctx, pb.Entry.Manifest); err != nil {
			p.fail(err)
			continue
		}
		res.Deleted = append(res.Deleted, id)
		lg.Info("deleted backup", "backup_id", id, "bytes", pb.Entry.Object.Size)
	}
	p.applyKits(ctx, res, res.Plan.listing, lg)
	for _, o := range res.Plan.Orphans {
		if err := ctx.Err(); err != nil {
			p.fail(fmt.Errorf("prune stopped: %w", err))
			return
		}
		if p.snapshotRunning() {
			lg.Info("orphan sweep stopped: a snapshot started; the rest waits for the next run", "cluster", p.b.Cluster)
			return
		}
		if repository.Held(o.Key) {
			lg.Info("orphan kept for now: held by a restore or drill", "key", o.Key)
			continue
		}
		if err := p.b.Store.Delete(ctx, o.Key); err != nil {
			p.fail(fmt.Errorf("remove orphan: %w", err))
			continue
		}
		res.OrphansRemoved++
		lg.Info("removed orphan", "key", o.Key, "bytes", o.Size)
	}
	if len(res.Plan.IncompleteUploads) > 0 {
		s := p.b.Store.(incompleteUploadStore)
		for _, u := range res.Plan.IncompleteUploads {
			if p.snapshotRunning() {
				lg.Info("orphan sweep stopped: a snapshot started; the rest waits for the next run", "cluster", p.b.Cluster)
				return
			}
			if err := s.AbortIncomplete(ctx, u.Key, u.UploadID); err != nil {
				p.fail(err)
				continue
			}
			res.UploadsAborted++
			lg.Info("aborted incomplete upload", "key", u.Key, "upload_id", u.UploadID)
		}
	}
}

// deleteBackup deletes manifest, data object and drill reports, in that
// order: after the first step the backup is no longer listed, and what a
// failure leaves behind is an orphan.
func (p *pruner) deleteBackup(ctx context.Context, m *repository.Manifest) error {
	if err := p.b.Store.Delete(ctx, p.b.ManifestKey(m.ID)); err != nil {
		return fmt.Errorf("delete backup %s: manifest: %w", m.ID, err)
	}
	if err := p.b.Store.Delete(ctx, m.Object); err != nil {
		return fmt.Errorf("delete backup %s: manifest deleted, data object left as an orphan: %w", m.ID, err)
	}
	var reports []string
	err := p.b.Store.List(ctx, drillPrefix(p.b, m.ID), func(o uploader.ObjectInfo) error {
		reports = append(reports, o.Key)
		return nil
	})
	if err != nil {
		return fmt.Errorf("delete backup %s: drill reports left as orphans: %w", m.ID, err)
	}
	for _, k := range reports {
		// A report still locked stays, an orphan that the sweep
		// removes once its lock has run out.
		if locked, err := repository.LockedNow(ctx, p.b.Store, k, p.now); err != nil || locked {
			continue
		}
		if err := p.b.Store.Delete(ctx, k); err != nil {
			return fmt.Errorf("delete backup %s: drill reports left as orphans: %w", m.ID, err)
		}
	}
	return nil
}

// drillPrefix is the key prefix of backup id's drill reports.
func drillPrefix(b *repository.Repo, id string) string {
	return path.Join(b.Cluster, "drills", id) + "/"
}

// Locked reports whether manifest m records an Object Lock retention or
// legal hold in force at now: what the primary's writer asked for. Run
// does not decide on it (a copy holds the primary's manifest verbatim,
// and the store may lock otherwise): it asks the store.
func Locked(m *repository.Manifest, now time.Time) bool {
	return m.LegalHold || (m.LockMode != "" && m.RetainUntil != nil && now.Before(*m.RetainUntil))
}

// idOf returns the backup id a snapshots/ key belongs to: its base name up
// to the first dot (<id>.json, <id>.db.zst.age).
func idOf(key string) string {
	id, _, _ := strings.Cut(path.Base(key), ".")
	return id
}
