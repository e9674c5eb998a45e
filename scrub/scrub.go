package scrub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// DefaultCycle is scrub.cycle's default: every object read in full at
// least once in this time.
const DefaultCycle = 30 * 24 * time.Hour

// DefaultReadData is scrub.read_data's default percent.
const DefaultReadData = 5

// Job is one scrub of one cluster in one store.
type Job struct {
	// Repo is the cluster's repository in the store scrubbed (its Trust
	// decides what is untrusted; its Signer signs the state and the damage
	// records).
	Repo *repository.Repo
	// Identities open the encrypted objects.
	Identities []age.Identity
	// ReadData is the least percent of the stored bytes read in full.
	ReadData float64
	// Cycle is the longest an object goes without a full read (0:
	// DefaultCycle).
	Cycle time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
	// Workers bounds the objects checked at once (0: 4).
	Workers int
	// DryRun records nothing (no damage records, no state).
	DryRun bool
}

// Finding is one object damaged or not checked.
type Finding struct {
	Key     string `json:"key"`
	Kind    string `json:"kind"`
	Problem string `json:"problem"`
}

// Result is what one run found.
type Result struct {
	Store string    `json:"store"`
	At    time.Time `json:"at"`
	// Objects were checked (exist with their size, headers opened);
	// ObjectsRead of them read in full, BytesRead bytes read in all.
	Objects     int   `json:"objects"`
	ObjectsRead int   `json:"objects_read"`
	BytesRead   int64 `json:"bytes_read"`
	TotalBytes  int64 `json:"total_bytes"`
	// Damaged are proven damaged; NotChecked could not be read (unknown,
	// not good); Untrusted are what the trust code reports.
	Damaged    []Finding `json:"damaged"`
	NotChecked []Finding `json:"not_checked"`
	Untrusted  int       `json:"untrusted"`
	// RecordErrors are damage records or the state that could not be
	// written (the findings stand).
	RecordErrors []string `json:"record_errors,omitempty"`
}

// Sound reports whether the run checked everything and found no damage.
func (r *Result) Sound() bool { return len(r.Damaged) == 0 && len(r.NotChecked) == 0 }

// Validate checks the job's settings.
func (j Job) Validate() error {
	switch {
	case j.Repo == nil:
		return errors.New("scrub: no repository")
	case j.ReadData < 0 || j.ReadData > 100:
		return fmt.Errorf("scrub: read_data %g%%: must be 0-100", j.ReadData)
	case j.Cycle < 0:
		return fmt.Errorf("scrub: cycle %s: must not be negative", j.Cycle)
	}
	return nil
}

// Run scrubs the store: see the package comment. The error is for a run
// that could not judge the store (a listing failed, unusable keys); damage
// is in the Result.
func Run(ctx context.Context, j Job, lg *slog.Logger) (*Result, error) {
	if err := j.Validate(); err != nil {
		return nil, err
	}
	j = j.withDefaults()
	now := j.Now().UTC()
	inv, err := take(ctx, j.Repo, j.kits())
	if err != nil {
		return nil, fmt.Errorf("scrub %s: %w", j.Repo.Store, err)
	}
	if err := j.needIdentities(inv); err != nil {
		return nil, err
	}
	rot, err := j.rotation(ctx, lg)
	if err != nil {
		return nil, err
	}
	items := make([]Item, len(inv.objects))
	for i, o := range inv.objects {
		items[i] = Item{Key: o.Key, Size: o.Size, ModTime: o.ModTime}
	}
	plan := rot.Plan(items, now)
	outs := j.checkAll(ctx, inv.objects, plan)
	res, marks, err := j.judge(inv, outs, rot.Marks(items, now), now)
	if err != nil {
		return nil, err
	}
	j.record(ctx, res, marks, lg)
	return res, nil
}

func (j Job) withDefaults() Job {
	if j.Cycle == 0 {
		j.Cycle = DefaultCycle
	}
	if j.Now == nil {
		j.Now = time.Now
	}
	if j.Workers <= 0 {
		j.Workers = 4
	}
	return j
}

func (j Job) kits() kit.Repo {
	return kit.Repo{Store: j.Repo.Store, Cluster: j.Repo.Cluster, Signer: j.Repo.Signer, Trust: j.Repo.Trust}
}

// needIdentities refuses to scrub encrypted objects without identities:
// the configuration is wrong, the objects are not damaged.
func (j Job) needIdentities(inv *inventory) error {
	if len(j.Identities) > 0 {
		return nil
	}
	for _, o := range inv.objects {
		if o.encrypted {
			return fmt.Errorf("scrub %s: %s is encrypted: %w", j.Repo.Store, o.Key, repository.ErrNoIdentity)
		}
	}
	return nil
}

// rotation reads the previous run's state. A state that does not parse
// or is untrusted starts the rotation afresh (more is read, never less);
// a store error fails the run.
func (j Job) rotation(ctx context.Context, lg *slog.Logger) (Rotation, error) {
	rot := Rotation{Percent: j.ReadData, Cycle: j.Cycle}
	st, err := j.Repo.LatestScrubState(ctx)
	switch {
	case errors.Is(err, repository.ErrBadScrubState) || errors.Is(err, repository.ErrUntrusted):
		lg.Warn("scrub state unusable; the rotation starts afresh", "store", j.Repo.Store.String(), "err", err)
	case err != nil:
		return rot, fmt.Errorf("scrub %s: read the scrub state: %w", j.Repo.Store, err)
	case st != nil:
		rot.Prev, rot.PrevAt = st.Read, st.At
	}
	return rot, nil
}

// checkAll checks every object, those in plan in full, with j.Workers at
// a time; outcomes are in the order of objs.
func (j Job) checkAll(ctx context.Context, objs []*object, plan []string) []outcome {
	full := make(map[string]bool, len(plan))
	for _, k := range plan {
		full[k] = true
	}
	c := &checker{repo: j.Repo, kits: j.kits(), ids: j.Identities}
	outs := make([]outcome, len(objs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range j.Workers {
		wg.Go(func() {
			for i := range next {
				outs[i] = c.check(ctx, objs[i], full[objs[i].Key])
				if full[objs[i].Key] && outs[i].v == good {
					outs[i].full = true
				}
			}
		})
	}
	for i := range objs {
		next <- i
	}
	close(next)
	wg.Wait()
	return outs
}

// judge sums the outcomes up. When encrypted objects were opened and none
// opened with the identities, the identities are wrong (a configuration
// error), not every object damaged.
func (j Job) judge(inv *inventory, outs []outcome, marks map[string]repository.ScrubMark, now time.Time) (*Result, map[string]repository.ScrubMark, error) {
	res := &Result{Store: j.Repo.Store.String(), At: now, Damaged: append([]Finding{}, inv.damaged...), NotChecked: []Finding{}, Untrusted: inv.untrusted}
	opened, refused := 0, 0
	for i, o := range inv.objects {
		out := outs[i]
		res.BytesRead += out.bytes
		res.TotalBytes += o.Size
		f := Finding{Key: o.Key, Kind: o.kind, Problem: out.problem}
		switch out.v {
		case good:
			res.Objects++
			opened += b2i(o.encrypted)
			if out.full {
				res.ObjectsRead++
				m := marks[o.Key]
				m.ReadAt = now
				marks[o.Key] = m
			}
		case keys:
			refused++
			res.Objects++
			res.Damaged = append(res.Damaged, f)
		case damaged:
			res.Objects++
			res.Damaged = append(res.Damaged, f)
		case notChecked:
			res.NotChecked = append(res.NotChecked, f)
		case untrusted:
			res.Untrusted++
			delete(marks, o.Key)
		case gone:
			delete(marks, o.Key)
		}
	}
	if refused > 0 && opened == 0 {
		return nil, nil, fmt.Errorf("scrub %s: none of the %d encrypted objects opens with the identities given: %w", j.Repo.Store, refused, repository.ErrDecrypt)
	}
	if i := newestBackup(inv.objects); i >= 0 && outs[i].v == keys {
		// A key rotation orphans old objects, never the newest backup:
		// the identities are not this store's.
		return nil, nil, fmt.Errorf("scrub %s: the newest backup %s does not open with the identities given: %w", j.Repo.Store, inv.objects[i].Key, repository.ErrDecrypt)
	}
	sort.Slice(res.Damaged, func(a, b int) bool { return res.Damaged[a].Key < res.Damaged[b].Key })
	sort.Slice(res.NotChecked, func(a, b int) bool { return res.NotChecked[a].Key < res.NotChecked[b].Key })
	return res, marks, nil
}

// newestBackup is the index of the newest encrypted backup's data object
// (ids, and so keys, sort by time), -1 when there is none.
func newestBackup(objs []*object) int {
	n := -1
	for i, o := range objs {
		if o.kind == KindBackup && o.encrypted && (n < 0 || o.Key > objs[n].Key) {
			n = i
		}
	}
	return n
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// record stores a damage record for each damaged object and the new
// state; what cannot be written is in res.RecordErrors and logged.
func (j Job) record(ctx context.Context, res *Result, marks map[string]repository.ScrubMark, lg *slog.Logger) {
	if j.DryRun {
		return
	}
	for _, f := range res.Damaged {
		d := repository.Damage{Object: f.Key, FoundBy: repository.FoundByScrub, FoundAt: res.At, Error: f.Kind + " " + f.Problem}
		if err := j.Repo.RecordDamage(ctx, d); err != nil {
			res.RecordErrors = append(res.RecordErrors, err.Error())
		}
	}
	st := &repository.ScrubState{At: res.At, Objects: res.Objects, BytesRead: res.BytesRead, Damaged: len(res.Damaged), NotChecked: len(res.NotChecked), Read: marks}
	if err := j.Repo.PutScrubState(ctx, st); err != nil {
		res.RecordErrors = append(res.RecordErrors, err.Error())
	}
	for _, e := range res.RecordErrors {
		lg.Warn("scrub could not record", "store", res.Store, "err", e)
	}
}
