package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Drills off the control plane: the hub rehearses each cluster's
// restore itself (restore/drill, the agent's own drill code: fetch,
// decode, restore, boot a throwaway etcd in a child process, check) and
// stores the report as that cluster's drill report, so `lifeboat list`
// in that cluster shows it and the fleet's next read judges it.
//
// The hub is read-only everywhere else: a drill writes through
// drillView, which lets Put through only under <cluster>/drills/ of the
// cluster being drilled and refuses every other write (ErrReadOnly),
// deletes included. Its credentials need s3:PutObject on
// <prefix>/*/drills/* and nothing more beyond the readers'.

// DrillConfig is how the hub drills the fleet's clusters.
type DrillConfig struct {
	// Schedule is a cron schedule every cluster is drilled on; empty: the
	// cluster's own drill schedule (the one its agent states, see
	// Status.DrillDue; a cluster with none is not drilled).
	Schedule string
	// Concurrency bounds the drills run at once (default 1); each needs
	// scratch space for its backup's database twice over.
	Concurrency int
	// Identities returns the age identities of a cluster (nil, nil:
	// none, for unencrypted backups).
	Identities func(cluster string) ([]age.Identity, error)
	// ScratchDir holds each drill's files, a subdirectory per drill,
	// removed after it on every path (restore/drill).
	ScratchDir string
	// Timeout bounds each drill (default 15m).
	Timeout time.Duration
	// EtcdBinary runs the throwaway etcd ("": this program, as a child).
	EtcdBinary string
	// Version is lifeboat's version, recorded in the reports.
	Version string
	// Signer, when set, signs the reports (nil: unsigned; readers with
	// trusted keys then call them untrusted).
	Signer *signing.Key
}

// DrillResult is one drill the hub ran.
type DrillResult struct {
	Store, Cluster string
	// PointInTime: the cluster's point-in-time drill (pointInTime); else
	// the drill of its newest backup.
	PointInTime bool
	// Outcome is the drill's (nil when no backup could be selected).
	Outcome *drill.Outcome
	// Err is why the drill failed or could not run.
	Err error
}

// Drills runs the hub's drills. Safe for concurrent use; a cluster is
// never drilled twice at once.
type Drills struct {
	cfg     DrillConfig
	policy  Policy
	lg      *slog.Logger
	mu      sync.Mutex
	running map[[2]string]bool
	tried   map[[2]string]time.Time // when each cluster's last drill ended
}

// retryAfter spaces two hub drills of one cluster: one that could not
// run to a verdict (no report stored) is tried again after it, not at
// every refresh, and a refresh that read the store before the last
// drill's report was stored does not drill again.
const retryAfter = 15 * time.Minute

// NewDrills returns the drill runner of cfg; p decides when a schedule's
// drill is due.
func NewDrills(cfg DrillConfig, p Policy, lg *slog.Logger) (*Drills, error) {
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 1
	}
	if cfg.ScratchDir == "" {
		return nil, errors.New("fleet drills: a scratch directory is needed")
	}
	if cfg.Schedule != "" {
		if _, err := cronParser.Parse(cfg.Schedule); err != nil {
			return nil, fmt.Errorf("fleet drills: schedule %q: %w", cfg.Schedule, err)
		}
	}
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	return &Drills{cfg: cfg, policy: p, lg: lg, running: map[[2]string]bool{}, tried: map[[2]string]time.Time{}}, nil
}

// Due returns the clusters of r whose drill is due at now: never
// drilled, or the next run of the schedule after their newest drill
// (the cluster's own DrillDue without a fleet schedule) has come.
// Clusters that cannot be read are not drilled.
func (d *Drills) Due(r *Report, now time.Time) []Status {
	var out []Status
	for _, s := range r.Clusters {
		if s.ReadError != "" || s.Newest == nil || d.triedSince(s.Store, s.Name, now.Add(-retryAfter)) {
			continue
		}
		var next *time.Time
		switch {
		case d.cfg.Schedule != "" && s.Drill == nil:
			next = &now
		case d.cfg.Schedule != "":
			if dd, ok := d.policy.bySchedule(d.cfg.Schedule, s.Drill.Started); ok {
				next = &dd.next
			}
		default:
			next = s.DrillDue
		}
		if next != nil && !now.Before(*next) {
			out = append(out, s)
		}
	}
	return out
}

// Run drills each of due (Due's), Concurrency at once, in its store
// among sources, and returns when all have ended. A drill that fails or
// cannot run is its cluster's result only: every other drill runs.
func (d *Drills) Run(ctx context.Context, sources []Source, due []Status) []DrillResult {
	byName := map[string]Source{}
	for _, s := range sources {
		byName[s.Name] = s
	}
	out := make([][]DrillResult, len(due))
	var wg sync.WaitGroup
	sem := make(chan struct{}, d.cfg.Concurrency)
	for i, s := range due {
		src, ok := byName[s.Store]
		if !ok {
			out[i] = []DrillResult{{Store: s.Store, Cluster: s.Name, Err: fmt.Errorf("drill %s: store %s is not one of the fleet's", s.Name, s.Store)}}
			continue
		}
		if !d.claim(s.Store, s.Name) {
			out[i] = []DrillResult{{Store: s.Store, Cluster: s.Name, Err: fmt.Errorf("drill %s: a drill of it is running", s.Name)}}
			continue
		}
		wg.Go(func() {
			defer d.release(s.Store, s.Name)
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = d.cluster(ctx, src, s)
		})
	}
	wg.Wait()
	var all []DrillResult
	for _, rs := range out {
		all = append(all, rs...)
	}
	return all
}

// cluster runs the drills of one cluster, one after the other: its
// newest backup, then, where capture runs (its store holds change
// windows), a point-in-time target.
func (d *Drills) cluster(ctx context.Context, src Source, s Status) []DrillResult {
	r := DrillResult{Store: s.Store, Cluster: s.Name}
	r.Outcome, r.Err = d.one(ctx, src, s.Name)
	d.log(r)
	out := []DrillResult{r}
	if s.Window == nil || ctx.Err() != nil {
		return out
	}
	pr := DrillResult{Store: s.Store, Cluster: s.Name, PointInTime: true}
	pr.Outcome, pr.Err = d.pointInTime(ctx, src, s.Name)
	if pr.Outcome == nil && pr.Err == nil {
		return out // no backup inside a window to compare with
	}
	d.log(pr)
	return append(out, pr)
}

func (d *Drills) claim(store, cluster string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := [2]string{store, cluster}
	if d.running[k] {
		return false
	}
	d.running[k] = true
	return true
}

func (d *Drills) release(store, cluster string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running, [2]string{store, cluster})
	d.tried[[2]string{store, cluster}] = time.Now()
}

// triedSince reports whether a drill of the cluster ended after t.
func (d *Drills) triedSince(store, cluster string, t time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	at, ok := d.tried[[2]string{store, cluster}]
	return ok && at.After(t)
}

// one drills the newest backup of cluster in src through the drill
// view, storing its report when it reached a verdict (drill.RunJob).
func (d *Drills) one(ctx context.Context, src Source, cluster string) (*drill.Outcome, error) {
	job, err := d.job(src, cluster)
	if err != nil {
		return nil, err
	}
	job.Target = "latest"
	out, err := drill.RunJob(ctx, job, d.lg.With("store", src.Name, "cluster", cluster))
	if err != nil {
		return out, fmt.Errorf("drill %s: %w", cluster, err)
	}
	return out, nil
}

// job is a drill job of cluster in src: through the drill view, with
// the cluster's identities and its own scratch subdirectory.
func (d *Drills) job(src Source, cluster string) (drill.Job, error) {
	var ids []age.Identity
	if d.cfg.Identities != nil {
		var err error
		if ids, err = d.cfg.Identities(cluster); err != nil {
			return drill.Job{}, fmt.Errorf("drill %s: %w", cluster, err)
		}
	}
	repo := repository.New(drillView{st: src.Store, cluster: cluster}, cluster)
	repo.Trust, repo.Signer = src.Trust, d.cfg.Signer
	return drill.Job{Backups: repo, Options: drill.Options{
		Identities: ids, ScratchDir: filepath.Join(d.cfg.ScratchDir, scratchName(cluster)),
		EtcdBinary: d.cfg.EtcdBinary, Timeout: d.cfg.Timeout, Version: d.cfg.Version,
	}}, nil
}

// scratchName is a cluster's scratch subdirectory: its name with every
// byte outside [A-Za-z0-9._-] replaced.
func scratchName(cluster string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '-':
			return r
		}
		return '_'
	}, cluster)
}

func (d *Drills) log(r DrillResult) {
	lg := d.lg.With("store", r.Store, "cluster", r.Cluster)
	if r.PointInTime {
		lg = lg.With("point_in_time", true)
		if r.Outcome != nil {
			lg = lg.With("target_revision", r.Outcome.TargetRevision)
		}
	}
	switch {
	case r.Outcome != nil && r.Outcome.Passed:
		lg.Info("fleet drill passed", "backup_id", r.Outcome.BackupID, "rto_seconds", r.Outcome.Recovery.Seconds())
	case r.Outcome != nil && !r.Outcome.RunError:
		lg.Warn("fleet drill FAILED", "backup_id", r.Outcome.BackupID, "err", r.Err)
	default:
		lg.Warn("fleet drill could not run to a verdict", "err", r.Err)
	}
}

// drillView is a store as a hub drill of one cluster may use it: every
// read, and Put only under <cluster>/drills/ (its reports); every other
// write is refused with ErrReadOnly.
type drillView struct {
	st      uploader.Store
	cluster string
}

func (v drillView) List(ctx context.Context, prefix string, fn func(uploader.ObjectInfo) error) error {
	return v.st.List(ctx, prefix, fn)
}

func (v drillView) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return v.st.Get(ctx, key)
}

func (v drillView) Stat(ctx context.Context, key string) (uploader.ObjectInfo, error) {
	return v.st.Stat(ctx, key)
}

func (v drillView) Put(ctx context.Context, key string, r io.Reader, o uploader.PutOptions) (uploader.ObjectInfo, error) {
	if !strings.HasPrefix(key, v.cluster+"/drills/") || strings.Contains(key, "..") {
		return uploader.ObjectInfo{}, fmt.Errorf("put %s: %w (a hub drill of %s writes only its drill reports)", key, ErrReadOnly, v.cluster)
	}
	return v.st.Put(ctx, key, r, o)
}

func (v drillView) Delete(_ context.Context, key string) error {
	return fmt.Errorf("delete %s: %w", key, ErrReadOnly)
}

func (v drillView) String() string { return v.st.String() }
