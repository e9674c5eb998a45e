package retention

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Backup is what the policy needs to know about one stored backup.
type Backup struct {
	ID          string
	Time        time.Time // when the snapshot was taken
	Size        int64     // bytes in the store; carried through, not used by the rules
	DrillPassed bool      // its last drill passed
	Locked      bool      // under Object Lock retention or legal hold at now
	// DrillUnknown: its last drill's verdict cannot be known (the report
	// is unreadable). Such a backup may be the newest proven one.
	DrillUnknown bool
	// Anchor: it is the snapshot a retained change window starts from
	// (PlanChanges sets it); it is kept with the reason "anchor".
	Anchor bool
	// State names the etcd state the backup holds (its lineage,
	// revision and HashKV): keep-last counts distinct states, so a newer
	// backup of the same state does not push an older, different one
	// out. Empty means unknown: a state of its own.
	State string
}

// Decision is the verdict on one backup.
type Decision struct {
	Backup Backup
	Keep   bool
	// Reasons lists what kept the backup, in a fixed order: "last",
	// "hourly 2026-11-29 13:00", "daily 2026-11-29", "weekly 2026-W48",
	// "monthly 2026-11", "yearly 2026", "within 7d", "newest",
	// "newest-proven", "drill-unknown", "locked", "anchor". It is empty exactly when
	// Keep is false.
	Reasons []string
}

// reason bits, in the order reasons are reported.
const (
	keepLast uint16 = 1 << iota
	keepHourly
	keepDaily
	keepWeekly
	keepMonthly
	keepYearly
	keepWithin
	keepNewest
	keepNewestProven
	keepDrillUnknown
	keepLocked
	keepAnchor
)

// Plan applies p to backups at time now and returns one decision per
// backup, newest first (equal times ordered by ID, descending). The input
// slice is not modified. Plan fails when p is invalid, and when two backups
// share an ID, since deleting that ID could then remove a kept backup.
//
// Plan is deterministic, and idempotent: planning again over the kept
// backups with the same p and now keeps all of them.
func Plan(backups []Backup, p Policy, now time.Time) ([]Decision, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := checkUniqueIDs(backups); err != nil {
		return nil, err
	}
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}

	order := sortNewestFirst(backups)
	marks := make([]uint16, len(order))
	markLast(marks, backups, order, p)
	markCalendar(marks, backups, order, p, loc)
	markWithin(marks, backups, order, p, now)
	markGuarantees(marks, backups, order)
	return decide(backups, order, marks, p, loc), nil
}

// markLast marks the newest backup of each of the newest p.Last distinct
// states (keep-last). A backup whose state a newer one holds takes no
// slot: an idle cluster's identical backups do not push older, different
// states out.
func markLast(marks []uint16, backups []Backup, order []entry, p Policy) {
	var seen map[string]bool
	n := 0
	for i, e := range order {
		if p.Last != Unlimited && n >= p.Last {
			break
		}
		if st := backups[e.idx].State; st != "" {
			if seen[st] {
				continue
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[st] = true
		}
		marks[i] |= keepLast
		n++
	}
}

// markCalendar marks the newest backup of each of the newest hourly,
// daily, weekly, monthly and yearly buckets (in loc) each rule keeps.
func markCalendar(marks []uint16, backups []Backup, order []entry, p Policy, loc *time.Location) {
	// Calendar rules, one pass. A rule stops looking once it has its N
	// buckets, and the pass stops when every rule has.
	rules := [...]bucketRule{
		{n: p.Hourly, bit: keepHourly},
		{n: p.Daily, bit: keepDaily},
		{n: p.Weekly, bit: keepWeekly},
		{n: p.Monthly, bit: keepMonthly},
		{n: p.Yearly, bit: keepYearly},
	}
	for i, e := range order {
		active := false
		for r := range rules {
			if !rules[r].done() {
				active = true
				break
			}
		}
		if !active {
			break
		}
		t := backups[e.idx].Time.In(loc)
		y, m, d := t.Date()
		date := (int64(y)*100+int64(m))*100 + int64(d)
		if r := &rules[0]; !r.done() && r.take(date*100+int64(t.Hour())) {
			marks[i] |= r.bit
		}
		if r := &rules[1]; !r.done() && r.take(date) {
			marks[i] |= r.bit
		}
		if r := &rules[2]; !r.done() {
			wy, wk := t.ISOWeek()
			if r.take(int64(wy)*100 + int64(wk)) {
				marks[i] |= r.bit
			}
		}
		if r := &rules[3]; !r.done() && r.take(int64(y)*100+int64(m)) {
			marks[i] |= r.bit
		}
		if r := &rules[4]; !r.done() && r.take(int64(y)) {
			marks[i] |= r.bit
		}
	}
}

// markWithin marks the backups newer than p.Within before now.
func markWithin(marks []uint16, backups []Backup, order []entry, p Policy, now time.Time) {
	// keep-within: the order is newest first, so stop at the first old one.
	if p.Within > 0 {
		// Round(0) drops a monotonic reading: compare wall clocks, as
		// the sort does.
		cutoff := now.Add(-p.Within).Round(0)
		for i, e := range order {
			if !backups[e.idx].Time.After(cutoff) {
				break
			}
			marks[i] |= keepWithin
		}
	}
}

// markGuarantees marks what every policy keeps: the newest backup, the
// newest proven one (and those of unknown verdict newer than it), the
// locked ones and the anchors of retained change windows.
func markGuarantees(marks []uint16, backups []Backup, order []entry) {
	if len(order) > 0 {
		marks[0] |= keepNewest
	}
	// Unknown is not good, nor bad: a backup whose last verdict is
	// unknown and that is newer than the newest proven one may be the
	// newest proven backup.
	for i, e := range order {
		b := &backups[e.idx]
		if b.DrillUnknown {
			marks[i] |= keepDrillUnknown
			continue
		}
		if b.DrillPassed {
			marks[i] |= keepNewestProven
			break
		}
	}
	for i, e := range order {
		if backups[e.idx].Locked {
			marks[i] |= keepLocked
		}
		if backups[e.idx].Anchor {
			marks[i] |= keepAnchor
		}
	}
}

// entry is a backup's sort key; sorting these small values is cheaper than
// sorting Backups or comparing time.Time.
type entry struct {
	sec  int64
	nsec int32
	idx  int32
}

func sortNewestFirst(backups []Backup) []entry {
	order := make([]entry, len(backups))
	for i, b := range backups {
		order[i] = entry{sec: b.Time.Unix(), nsec: int32(b.Time.Nanosecond()), idx: int32(i)}
	}
	slices.SortFunc(order, func(a, b entry) int {
		if c := cmp.Compare(b.sec, a.sec); c != 0 {
			return c
		}
		if c := cmp.Compare(b.nsec, a.nsec); c != 0 {
			return c
		}
		return strings.Compare(backups[b.idx].ID, backups[a.idx].ID)
	})
	return order
}

func checkUniqueIDs(backups []Backup) error {
	seen := make(map[string]struct{}, len(backups))
	for _, b := range backups {
		if _, dup := seen[b.ID]; dup {
			return fmt.Errorf("plan retention: backup id %q listed twice", b.ID)
		}
		seen[b.ID] = struct{}{}
	}
	return nil
}

// bucketRule is one calendar rule while it picks backups. Keys are ints
// built from wall-clock fields (2026112913 for an hour), so a bucket is
// the same whatever the UTC offset.
type bucketRule struct {
	n   int    // buckets wanted; Unlimited for all
	bit uint16 // the reason it gives
	// picked holds the keys of the buckets picked so far, in descending
	// order. Newest first, keys normally only fall, so a new bucket is an
	// append; a key can rise again only when wall-clock time goes back
	// (the repeated hour at the end of daylight saving time), and then it
	// is looked up so that no bucket is picked twice.
	picked []int64
}

func (r *bucketRule) done() bool {
	return r.n != Unlimited && len(r.picked) >= r.n
}

// take reports whether the backup with this key is the first one seen in
// its bucket, and records the bucket.
func (r *bucketRule) take(key int64) bool {
	n := len(r.picked)
	if n == 0 || key < r.picked[n-1] {
		r.picked = append(r.picked, key)
		return true
	}
	if key == r.picked[n-1] {
		return false
	}
	i, found := slices.BinarySearchFunc(r.picked, key, func(e, k int64) int { return cmp.Compare(k, e) })
	if found {
		return false
	}
	r.picked = slices.Insert(r.picked, i, key)
	return true
}

// decide builds the decisions, with reason strings for kept backups only.
// All reasons share one backing array.
func decide(backups []Backup, order []entry, marks []uint16, p Policy, loc *time.Location) []Decision {
	total := 0
	for _, m := range marks {
		total += bits.OnesCount16(m)
	}
	all := make([]string, 0, total)
	within := "within " + formatDuration(p.Within)
	out := make([]Decision, len(order))
	var buf []byte
	for i, e := range order {
		b := backups[e.idx]
		m := marks[i]
		out[i] = Decision{Backup: b, Keep: m != 0}
		if m == 0 {
			continue
		}
		start := len(all)
		var t time.Time
		if m&(keepHourly|keepDaily|keepWeekly|keepMonthly|keepYearly) != 0 {
			t = b.Time.In(loc)
		}
		if m&keepLast != 0 {
			all = append(all, "last")
		}
		if m&keepHourly != 0 {
			buf = appendDate(append(buf[:0], "hourly "...), t)
			buf = append(buf, ' ')
			buf = append2(buf, t.Hour())
			buf = append(buf, ":00"...)
			all = append(all, string(buf))
		}
		if m&keepDaily != 0 {
			all = append(all, string(appendDate(append(buf[:0], "daily "...), t)))
		}
		if m&keepWeekly != 0 {
			wy, wk := t.ISOWeek()
			buf = appendYear(append(buf[:0], "weekly "...), wy)
			buf = append(buf, "-W"...)
			all = append(all, string(append2(buf, wk)))
		}
		if m&keepMonthly != 0 {
			buf = appendYear(append(buf[:0], "monthly "...), t.Year())
			buf = append(buf, '-')
			all = append(all, string(append2(buf, int(t.Month()))))
		}
		if m&keepYearly != 0 {
			all = append(all, string(appendYear(append(buf[:0], "yearly "...), t.Year())))
		}
		if m&keepWithin != 0 {
			all = append(all, within)
		}
		if m&keepNewest != 0 {
			all = append(all, "newest")
		}
		if m&keepNewestProven != 0 {
			all = append(all, "newest-proven")
		}
		if m&keepDrillUnknown != 0 {
			all = append(all, "drill-unknown")
		}
		if m&keepLocked != 0 {
			all = append(all, "locked")
		}
		if m&keepAnchor != 0 {
			all = append(all, "anchor")
		}
		out[i].Reasons = all[start:len(all):len(all)]
	}
	return out
}

// appendDate appends t's date as 2026-11-29.
func appendDate(b []byte, t time.Time) []byte {
	y, m, d := t.Date()
	b = appendYear(b, y)
	b = append(b, '-')
	b = append2(b, int(m))
	b = append(b, '-')
	return append2(b, d)
}

// appendYear appends y with at least four digits, as time.Format does.
func appendYear(b []byte, y int) []byte {
	if y < 0 {
		b = append(b, '-')
		y = -y
	}
	for p := 1000; p > 1 && y < p; p /= 10 {
		b = append(b, '0')
	}
	return strconv.AppendInt(b, int64(y), 10)
}

// append2 appends a two-digit number.
func append2(b []byte, n int) []byte {
	return append(b, byte('0'+n/10), byte('0'+n%10))
}
