package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Job is one copy's catch-up: what From (the primary) holds and To (the
// copy) wants and lacks is copied.
type Job struct {
	// Name is the copy's name, for logs and metrics (never its URL).
	Name string
	// From is the primary store's repository, To the copy's (one cluster).
	From, To *repository.Repo
	// Policy is the copy's retention policy: a backup (or a generation's
	// changes) is copied only when the policy would keep it. nil, or a
	// policy that keeps nothing (no retention configured), copies every
	// committed backup and every recoverable window.
	Policy *retention.Policy
	// Grace is how long the copy keeps a change segment that a compacted
	// one it holds replaced, from when it stored the compacted one (and
	// only once the primary no longer holds it either): a restore from
	// the copy that listed the replaced segments must still find them.
	// capture.compaction_grace; repository's default when zero.
	Grace time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// DryRun plans without writing anything.
	DryRun bool
	// Identities decrypt the primary's change segments so that each is
	// checked (parsed whole, its sha256 and signature) before it is
	// copied; without them an encrypted segment is copied as its bytes,
	// unchecked (the copy's own drills and verify read it).
	Identities []age.Identity
}

// ErrDamaged is wrapped when objects of the primary the copy wants are
// proven damaged (repository.DamageError: a data object whose sha256 is
// not its manifest's, a segment that does not parse): they are not
// copied, everything else is, and the run fails naming them. Running
// again does not help: the objects must be repaired or pruned.
var ErrDamaged = errors.New("objects of the primary are damaged")

// Damaged is an object of the primary the copy wants but does not take:
// proven damaged (found now or recorded before).
type Damaged struct {
	Key   string `json:"key"`
	Error string `json:"error"`
}

// Kinds of Planned items.
const (
	KindBackup  = "backup"
	KindKit     = "kit"
	KindSegment = "segment"
	KindMarker  = "marker"
)

// Planned is one object set a run copies (or, with DryRun, would copy):
// a backup (data object and manifest), a kit, a segment or a marker.
type Planned struct {
	Kind string `json:"kind"`
	// ID is the backup's or kit's id, or the segment's or marker's
	// generation.
	ID string `json:"id"`
	// Key is the object copied (a backup's data object).
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// Result is what a run did and the copy's state after it.
type Result struct {
	Name string `json:"name"`
	// Copied lists what was copied (or would be, with DryRun), in order.
	Copied []Planned `json:"copied"`
	// Adopted counts objects a killed run left in the copy that checked
	// out and were kept; Replaced those that did not and were written
	// again.
	Adopted  int `json:"adopted"`
	Replaced int `json:"replaced"`
	// Bytes is how many bytes were written to the copy.
	Bytes int64 `json:"bytes"`
	// Damaged are the primary's objects this run did not copy because
	// they are proven damaged (recorded in the primary: found by copy),
	// with what the window or backup lacks in the copy because of them.
	Damaged []Damaged `json:"damaged"`
	// Removed counts superseded segments and markers removed from the
	// copy because the primary no longer holds them (segments also only
	// once the compacted one that replaced them in the copy is past the
	// Job's Grace).
	Removed int `json:"removed"`
	// Backups is how many intact backups the copy holds after the run.
	Backups int `json:"backups"`
	// RecoveryPoint is the newest revision time the copy restores to from
	// a backup alone; ChangesPoint the newest one with its change windows
	// (RecoveryPoint when it has none). Zero when the copy holds no
	// backup, and not measured with DryRun.
	RecoveryPoint time.Time `json:"recovery_point,omitzero"`
	ChangesPoint  time.Time `json:"changes_point,omitzero"`
}

// Run brings job.To up to date with job.From. It stops at the first
// error, leaving everything copied so far committed and nothing
// half-copied listed; running it again continues. Proven damage of a
// primary object is no such error: the damaged backup is skipped, a
// window is copied up to the damaged segment, the damage is recorded in
// the primary (repository.RecordDamage, found by copy), the rest is
// copied, and the run returns an error wrapping ErrDamaged naming them
// (and again on every run while the primary holds them). The Result is
// non-nil also with an error (what was copied until then).
func Run(ctx context.Context, job Job, lg *slog.Logger) (*Result, error) {
	if job.Now == nil {
		job.Now = time.Now
	}
	r := &runner{job: job, lg: lg.With("store", job.Name), res: &Result{Name: job.Name}, plannedKit: map[string]bool{}}
	err := r.run(ctx)
	if err == nil {
		err = r.damageError()
	}
	if err != nil {
		err = fmt.Errorf("copy %s: %w", job.Name, err)
	}
	return r.res, err
}

type runner struct {
	job Job
	lg  *slog.Logger
	res *Result
	now time.Time
	// plannedKit are the kits a dry run already lists.
	plannedKit map[string]bool
	// damageErrs are the damage errors found by this run.
	damageErrs []error
}

func (r *runner) run(ctx context.Context) error {
	r.now = r.job.Now()
	from, err := r.job.From.List(ctx)
	if err != nil {
		return fmt.Errorf("list the primary %s: %w", r.job.From.Store, err)
	}
	windows, err := r.job.From.Windows(ctx, from)
	if err != nil {
		return fmt.Errorf("list the primary's changes: %w", err)
	}
	to, err := r.job.To.List(ctx)
	if err != nil {
		return fmt.Errorf("list the copy %s: %w", r.job.To.Store, err)
	}
	if err := sameLineages(r.job.To, from, to); err != nil {
		return err
	}
	wantB, wantG, err := r.wanted(from, windows)
	if err != nil {
		return err
	}
	has := map[string]bool{}
	for _, e := range to.Backups {
		has[e.Manifest.ID] = true
	}
	if err := r.repair(ctx, from, to); err != nil {
		return err
	}
	for _, e := range from.Backups {
		if d := from.DamageOf(e.Manifest.Object); d != nil && d.Untrusted == "" && !has[e.Manifest.ID] {
			r.skipped(d.Object, d.Error)
			continue
		}
		if !wantB[e.Manifest.ID] || has[e.Manifest.ID] {
			continue
		}
		err := r.copyBackup(ctx, e.Manifest)
		if r.damage(ctx, err) {
			continue
		}
		if err != nil {
			return err
		}
		has[e.Manifest.ID] = true
	}
	if err := r.changes(ctx, windows, wantG, has); err != nil {
		return err
	}
	if r.job.DryRun {
		return nil
	}
	return r.measure(ctx)
}

// wanted applies the copy's policy to the primary's intact backups and
// recoverable windows: the backups and generations the copy should hold.
func (r *runner) wanted(l *repository.Listing, windows []repository.Window) (backups, gens map[string]bool, err error) {
	backups, gens = map[string]bool{}, map[string]bool{}
	var bs []retention.Backup
	for _, e := range l.Backups {
		if e.State == repository.StateOK {
			bs = append(bs, retention.Backup{ID: e.Manifest.ID, Time: e.Manifest.CreatedAt, Size: e.Manifest.ObjectSize, State: e.Manifest.State()})
		}
	}
	var gs []retention.Generation
	for _, w := range windows {
		if w.Recoverable() {
			gs = append(gs, retention.Generation{ID: w.Generation, End: w.ThroughTime})
		}
	}
	p := r.job.Policy
	if p == nil || p.Validate() != nil {
		for _, b := range bs {
			backups[b.ID] = true
		}
		for _, g := range gs {
			gens[g.ID] = true
		}
		return backups, gens, nil
	}
	ds, gds, err := retention.PlanChanges(bs, gs, *p, r.now)
	if err != nil {
		return nil, nil, fmt.Errorf("plan with the copy's retention: %w", err)
	}
	for _, d := range ds {
		backups[d.Backup.ID] = d.Keep
	}
	for _, g := range gds {
		gens[g.Generation.ID] = g.Keep
	}
	return backups, gens, nil
}

// copyBackup copies one committed backup: its data object (checked in
// the copy), its kit, then its manifest, the copy's commit point. Every
// object is locked by the copy's own policy (To.Lock). The manifest is
// copied verbatim, the primary's bytes unchanged (a signature over them
// must hold in the copy): its lock fields say what the primary's writer
// asked for, and what locks the copy's objects is the copy's store's
// answer (Stat), which is what prune and verify --locks read.
func (r *runner) copyBackup(ctx context.Context, m *repository.Manifest) error {
	r.res.Copied = append(r.res.Copied, Planned{Kind: KindBackup, ID: m.ID, Key: m.Object, Size: m.ObjectSize})
	if r.job.DryRun {
		if m.Kit != "" && !r.plannedKit[m.Kit] && !r.hasKit(ctx, m.Kit) {
			r.plannedKit[m.Kit] = true
			key := kit.Repo{Store: r.job.To.Store, Cluster: r.job.To.Cluster}.ManifestKey(m.Kit)
			r.res.Copied = append(r.res.Copied, Planned{Kind: KindKit, ID: m.Kit, Key: key})
		}
		return nil
	}
	lock := r.job.To.Lock
	if err := r.object(ctx, m.Object, want{size: m.ObjectSize, sha256: m.ObjectSHA256}, lock.Options("application/octet-stream")); err != nil {
		return fmt.Errorf("backup %s: %w", m.ID, err)
	}
	if m.Kit != "" {
		if err := r.copyKit(ctx, m.Kit); err != nil {
			return fmt.Errorf("backup %s: %w", m.ID, err)
		}
	}
	err := r.copyManifest(ctx, m)
	if errors.Is(err, uploader.ErrExists) {
		// Committed meanwhile (another run): fine if it names the same object.
		got, gerr := r.job.To.Manifest(ctx, m.ID)
		if gerr != nil || got.ObjectSHA256 != m.ObjectSHA256 {
			return fmt.Errorf("backup %s: the copy already holds a different manifest for it: %w", m.ID, err)
		}
		err = nil
	}
	if err != nil {
		return fmt.Errorf("backup %s: %w", m.ID, err)
	}
	r.lg.Info("copy: backup committed", "backup_id", m.ID, "bytes", m.ObjectSize)
	return nil
}

// repair copies the data object again of each backup the copy committed
// whose object is gone (deleted by hand, lost by the store) while the
// primary holds it intact with the same bytes: the manifest already
// names it, the object lands whole and checked. An object of the wrong
// size is left for verify and prune to report: it may be evidence.
func (r *runner) repair(ctx context.Context, from, to *repository.Listing) error {
	primary := map[string]*repository.Manifest{}
	for _, e := range from.Backups {
		if e.State == repository.StateOK {
			primary[e.Manifest.ID] = e.Manifest
		}
	}
	for _, e := range to.Backups {
		m, ok := primary[e.Manifest.ID]
		if e.State != repository.StateBroken || e.Object.Key != "" || !ok || m.ObjectSHA256 != e.Manifest.ObjectSHA256 || m.Object != e.Manifest.Object {
			continue
		}
		r.res.Copied = append(r.res.Copied, Planned{Kind: KindBackup, ID: m.ID, Key: m.Object, Size: m.ObjectSize})
		if r.job.DryRun {
			continue
		}
		if err := r.object(ctx, m.Object, want{size: m.ObjectSize, sha256: m.ObjectSHA256}, r.job.To.Lock.Options("application/octet-stream")); err != nil {
			return fmt.Errorf("repair backup %s: %w", m.ID, err)
		}
		r.lg.Warn("copy: the copy's data object of a committed backup was missing; copied again", "backup_id", m.ID)
	}
	return nil
}

func (r *runner) hasKit(ctx context.Context, id string) bool {
	_, err := r.job.To.Store.Stat(ctx, kit.Repo{Store: r.job.To.Store, Cluster: r.job.To.Cluster}.ManifestKey(id))
	return err == nil
}

// copyKit copies kit id unless the copy has it: object, then manifest,
// both locked by the copy's policy. A kit the copy has already is needed
// by one more backup: its lock there is extended as far.
func (r *runner) copyKit(ctx context.Context, id string) error {
	src := kit.Repo{Store: r.job.From.Store, Cluster: r.job.From.Cluster, Trust: r.job.From.Trust}
	km, err := src.Manifest(ctx, id)
	if err != nil {
		return fmt.Errorf("its recovery kit in the primary: %w", err)
	}
	lock := r.job.To.Lock
	if r.hasKit(ctx, id) {
		until := lock.Retention.Until(r.now)
		for _, k := range []string{km.Object, src.ManifestKey(id)} {
			if err := repository.ExtendLock(ctx, r.job.To.Store, lock, k, until); err != nil {
				return fmt.Errorf("recovery kit %s in the copy: %w", id, err)
			}
		}
		return nil
	}
	if err := r.object(ctx, km.Object, want{size: km.ObjectSize, sha256: km.ObjectSHA256}, lock.Options("application/octet-stream")); err != nil {
		return fmt.Errorf("recovery kit %s: %w", id, err)
	}
	key := src.ManifestKey(id)
	if err := r.small(ctx, key, lock.Options("application/json")); err != nil {
		return fmt.Errorf("recovery kit %s: %w", id, err)
	}
	r.res.Copied = append(r.res.Copied, Planned{Kind: KindKit, ID: id, Key: km.Object, Size: km.ObjectSize})
	return nil
}

// measure lists the copy: its intact backups and its recovery points.
func (r *runner) measure(ctx context.Context) error {
	l, err := r.job.To.List(ctx)
	if err != nil {
		return fmt.Errorf("list the copy %s: %w", r.job.To.Store, err)
	}
	for _, e := range l.Backups {
		if e.State != repository.StateOK {
			continue
		}
		r.res.Backups++
		if t := e.Manifest.RevisionTime(); t.After(r.res.RecoveryPoint) {
			r.res.RecoveryPoint = t
		}
	}
	r.res.ChangesPoint = r.res.RecoveryPoint
	ws, err := r.job.To.Windows(ctx, l)
	if err != nil {
		return fmt.Errorf("list the copy's changes: %w", err)
	}
	for _, w := range ws {
		if w.Recoverable() && w.ThroughTime.After(r.res.ChangesPoint) {
			r.res.ChangesPoint = w.ThroughTime
		}
	}
	return nil
}

// copyManifest writes backup m's manifest to the copy as the primary's
// bytes, unchanged, after checking they are the manifest listed (same
// data object and sha256). One the copy holds already (another run
// committed it) is fine when it names the same object; ErrExists is
// returned for the caller to check that.
func (r *runner) copyManifest(ctx context.Context, m *repository.Manifest) error {
	key := r.job.From.ManifestKey(m.ID)
	data, err := readAll(ctx, r.job.From.Store, key, 1<<20)
	if err != nil {
		return fmt.Errorf("read manifest %s from the primary: %w", key, err)
	}
	if pm, err := repository.ParseManifest(data); err != nil || pm.ID != m.ID || pm.Object != m.Object || pm.ObjectSHA256 != m.ObjectSHA256 {
		return fmt.Errorf("manifest %s in the primary changed since it was listed: %w", key, ErrMismatch)
	}
	to := r.job.To.Store
	info, err := to.Put(ctx, r.job.To.ManifestKey(m.ID), bytes.NewReader(data), r.job.To.Lock.Options("application/json"))
	if err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	r.res.Bytes += info.Size
	sum := sha256.Sum256(data)
	return readBack(ctx, to, r.job.To.ManifestKey(m.ID), want{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])})
}

// sameLineages refuses a copy that holds backups of a lineage the
// primary does not: another etcd cluster's copy under this cluster name
// (a copy-pasted copies: entry). Copying into it would mix two clusters'
// backups under one name.
func sameLineages(to *repository.Repo, from, copied *repository.Listing) error {
	primary := map[string]bool{}
	for _, g := range from.Lineages() {
		primary[g.ID] = true
	}
	if len(primary) == 0 {
		return nil
	}
	for _, g := range copied.Lineages() {
		if !primary[g.ID] {
			return &repository.LineageError{Store: to.Store.String(), Cluster: to.Cluster, ClusterID: from.Lineages()[0].ID, Lineages: []*repository.Lineage{g}, Copy: true}
		}
	}
	return nil
}

// damage records the damage err proves in the primary (found by copy)
// and notes it in the result; false when err proves none.
func (r *runner) damage(ctx context.Context, err error) bool {
	de := repository.AsDamage(err)
	if de == nil {
		return false
	}
	if rerr := r.job.From.NoteDamage(ctx, de, repository.FoundByCopy); rerr != nil {
		r.lg.Warn("copy: the damage found in the primary is not recorded (read-only credentials?)", "object", de.Key, "err", rerr)
	}
	r.lg.Error("copy: an object of the primary is damaged; not copied, the rest is", "object", de.Key, "err", de.Err)
	r.damageErrs = append(r.damageErrs, err)
	r.skipped(de.Key, de.Err.Error())
	return true
}

// skipped notes a damaged primary object the copy does not take.
func (r *runner) skipped(key, why string) {
	for _, d := range r.res.Damaged {
		if d.Key == key {
			return
		}
	}
	r.res.Damaged = append(r.res.Damaged, Damaged{Key: key, Error: why})
}

// damageError is the run's error when it skipped damaged objects.
func (r *runner) damageError() error {
	if len(r.res.Damaged) == 0 {
		return nil
	}
	var names []string
	for _, d := range r.res.Damaged {
		names = append(names, d.Key+" ("+d.Error+")")
	}
	err := fmt.Errorf("%w: %d not copied, everything else was: %s; they are recorded in the primary (lifeboat list shows them): repair or prune them there, running copy again does not help (docs/pitr.md#damage)",
		ErrDamaged, len(names), strings.Join(names, "; "))
	if len(r.damageErrs) > 0 {
		err = fmt.Errorf("%w [%w]", err, errors.Join(r.damageErrs...))
	}
	return err
}
