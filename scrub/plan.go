package scrub

import (
	"sort"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// Item is an object as the rotation sees it.
type Item struct {
	Key  string
	Size int64
	// ModTime is when the store says it was written (zero: unknown).
	ModTime time.Time
}

// Rotation is what a plan is made of: the previous run's marks and time,
// the read_data percent and the cycle.
type Rotation struct {
	// Prev are the marks of the previous run by key (nil: none).
	Prev map[string]repository.ScrubMark
	// PrevAt is when the previous run was (zero: none).
	PrevAt time.Time
	// Percent is the least share of the bytes read in full (0-100).
	Percent float64
	// Cycle is the longest an object goes unread (> 0).
	Cycle time.Duration
}

// Marks returns the marks of items at now: the previous run's mark of an
// object of the same size, else a new one seen at its store time (or now).
func (r Rotation) Marks(items []Item, now time.Time) map[string]repository.ScrubMark {
	out := make(map[string]repository.ScrubMark, len(items))
	for _, it := range items {
		m, ok := r.Prev[it.Key]
		if !ok || m.Size != it.Size {
			seen := now
			if !it.ModTime.IsZero() && it.ModTime.Before(now) {
				seen = it.ModTime
			}
			m = repository.ScrubMark{Size: it.Size, SeenAt: seen.UTC()}
		}
		out[it.Key] = m
	}
	return out
}

// due is when an object must have been read again.
func due(m repository.ScrubMark, cycle time.Duration) time.Time {
	if !m.ReadAt.IsZero() {
		return m.ReadAt.Add(cycle)
	}
	return m.SeenAt.Add(cycle)
}

// Plan returns the keys of the items to read in full at now, most overdue
// first (see the package comment for the rule): those due before the next
// run, then more up to the budget. It is a pure function of its inputs.
func (r Rotation) Plan(items []Item, now time.Time) []string {
	marks := r.Marks(items, now)
	interval := time.Duration(0)
	if !r.PrevAt.IsZero() && now.After(r.PrevAt) {
		interval = min(now.Sub(r.PrevAt), r.Cycle)
	}
	var total int64
	for _, it := range items {
		total += it.Size
	}
	share := max(r.Percent/100, float64(interval)/float64(r.Cycle))
	budget := int64(share * float64(total))
	order := append([]Item(nil), items...)
	sort.Slice(order, func(i, j int) bool {
		di, dj := due(marks[order[i].Key], r.Cycle), due(marks[order[j].Key], r.Cycle)
		if !di.Equal(dj) {
			return di.Before(dj)
		}
		return order[i].Key < order[j].Key
	})
	horizon := now.Add(interval)
	var keys []string
	var planned int64
	for _, it := range order {
		must := !due(marks[it.Key], r.Cycle).After(horizon)
		if !must && planned >= budget {
			break
		}
		keys = append(keys, it.Key)
		planned += it.Size
	}
	return keys
}
