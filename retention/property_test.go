package retention

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// randomCase makes a random but reproducible input: backups spread over
// minutes to years, with equal times, drills, locks, and zones with odd
// offsets and daylight saving time.
func randomCase(t testing.TB, rng *rand.Rand) ([]Backup, Policy, time.Time) {
	zones := []*time.Location{
		nil, time.UTC,
		mustLoad(t, "Europe/Berlin"),
		mustLoad(t, "America/New_York"),
		mustLoad(t, "America/Santiago"),
		mustLoad(t, "Asia/Kolkata"),        // +05:30
		mustLoad(t, "Australia/Lord_Howe"), // half-hour daylight saving time
		mustLoad(t, "Pacific/Chatham"),     // +12:45
	}
	spacings := []time.Duration{time.Second, 7 * time.Minute, 20 * time.Minute, time.Hour, 5 * time.Hour, day, 9 * day, 40 * day}

	n := rng.Intn(300)
	if rng.Intn(10) == 0 {
		n = rng.Intn(3)
	}
	spacing := spacings[rng.Intn(len(spacings))]
	// Start in March or October now and then, to cross a DST change.
	start := time.Date(2020+rng.Intn(8), time.Month(1+rng.Intn(12)), 1+rng.Intn(28), rng.Intn(24), rng.Intn(60), 0, 0, time.UTC)
	if rng.Intn(3) == 0 {
		start = time.Date(2026, []time.Month{3, 4, 9, 10}[rng.Intn(4)], 20+rng.Intn(8), 0, 0, 0, 0, time.UTC)
	}
	pDrill := []float64{0, 0.05, 0.5}[rng.Intn(3)]
	pLock := []float64{0, 0.03, 0.3}[rng.Intn(3)]

	ids := rng.Perm(n) // ids unrelated to time order
	backups := make([]Backup, n)
	at := start
	for i := range backups {
		switch rng.Intn(10) {
		case 0: // same time as the previous one
		case 1:
			at = at.Add(time.Duration(rng.Int63n(int64(spacing))) + time.Nanosecond)
		default:
			at = at.Add(spacing/2 + time.Duration(rng.Int63n(int64(spacing))))
		}
		backups[i] = Backup{
			ID:          fmt.Sprintf("b%04d", ids[i]),
			Time:        at,
			Size:        rng.Int63n(1 << 30),
			DrillPassed: rng.Float64() < pDrill,
			Locked:      rng.Float64() < pLock,
		}
	}
	rng.Shuffle(n, func(i, j int) { backups[i], backups[j] = backups[j], backups[i] })

	count := func() int {
		switch r := rng.Intn(20); {
		case r < 10:
			return 0
		case r == 10:
			return Unlimited
		default:
			return 1 + rng.Intn(12)
		}
	}
	var p Policy
	for p.Validate() != nil {
		p = Policy{Last: count(), Hourly: count(), Daily: count(), Weekly: count(), Monthly: count(), Yearly: count()}
		if rng.Intn(3) == 0 {
			p.Within = time.Duration(rng.Int63n(int64(30 * day)))
		}
	}
	p.Location = zones[rng.Intn(len(zones))]

	// now: usually after the last backup, sometimes inside the range.
	span := at.Sub(start)
	now := at.Add(time.Duration(rng.Int63n(int64(2*day))) + 1)
	if rng.Intn(4) == 0 && span > 0 {
		now = start.Add(time.Duration(rng.Int63n(int64(span))))
	}
	// Now and then put a backup exactly on the keep-within boundary.
	if p.Within > 0 && n > 0 && rng.Intn(4) == 0 {
		now = backups[rng.Intn(n)].Time.Add(p.Within)
	}
	return backups, p, now
}

// oraclePlan is a slow, plain restatement of the rules, with string bucket
// keys from time.Format, to check Plan against.
func oraclePlan(backups []Backup, p Policy, now time.Time) []Decision {
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}
	sorted := append([]Backup(nil), backups...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if !sorted[i].Time.Equal(sorted[j].Time) {
			return sorted[i].Time.After(sorted[j].Time)
		}
		return sorted[i].ID > sorted[j].ID
	})
	reasons := make([][]string, len(sorted))
	add := func(i int, r string) { reasons[i] = append(reasons[i], r) }

	for i := range sorted {
		if p.Last == Unlimited || i < p.Last {
			add(i, "last")
		}
	}
	calendar := []struct {
		n      int
		bucket func(time.Time) string
	}{
		{p.Hourly, func(t time.Time) string { return "hourly " + t.Format("2006-01-02 15:00") }},
		{p.Daily, func(t time.Time) string { return "daily " + t.Format("2006-01-02") }},
		{p.Weekly, func(t time.Time) string {
			y, w := t.ISOWeek()
			return fmt.Sprintf("weekly %04d-W%02d", y, w)
		}},
		{p.Monthly, func(t time.Time) string { return "monthly " + t.Format("2006-01") }},
		{p.Yearly, func(t time.Time) string { return "yearly " + t.Format("2006") }},
	}
	picks := make([]map[int]string, len(calendar))
	for c, rule := range calendar {
		picks[c] = map[int]string{}
		seen := map[string]bool{}
		for i, b := range sorted {
			if rule.n != Unlimited && len(seen) >= rule.n {
				break
			}
			k := rule.bucket(b.Time.In(loc))
			if !seen[k] {
				seen[k] = true
				picks[c][i] = k
			}
		}
	}
	for i := range sorted {
		for c := range calendar {
			if r, ok := picks[c][i]; ok {
				add(i, r)
			}
		}
		if p.Within > 0 && sorted[i].Time.After(now.Add(-p.Within)) {
			add(i, "within "+formatDuration(p.Within))
		}
		if i == 0 {
			add(i, "newest")
		}
		if sorted[i].DrillPassed {
			proven := true
			for _, b := range sorted[:i] {
				if b.DrillPassed {
					proven = false
				}
			}
			if proven {
				add(i, "newest-proven")
			}
		}
		if sorted[i].Locked {
			add(i, "locked")
		}
	}
	out := make([]Decision, len(sorted))
	for i, b := range sorted {
		out[i] = Decision{Backup: b, Keep: len(reasons[i]) > 0, Reasons: reasons[i]}
	}
	return out
}

func keptSet(ds []Decision) map[string]bool {
	s := make(map[string]bool)
	for _, d := range ds {
		if d.Keep {
			s[d.Backup.ID] = true
		}
	}
	return s
}

func TestPlanProperties(t *testing.T) {
	iterations := 400
	if testing.Short() {
		iterations = 50
	}
	for _, seed := range []int64{1, 2, 3, 42, 20261130} {
		t.Run(fmt.Sprintf("seed-%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewSource(seed))
			for iter := range iterations {
				backups, p, now := randomCase(t, rng)
				input := slices.Clone(backups)
				ds := mustPlan(t, backups, p, now)
				where := fmt.Sprintf("seed %d iteration %d, %d backups, policy %q in %s, now %s", seed, iter, len(backups), p, locName(p.Location), now.Format(time.RFC3339Nano))

				if diff := cmp.Diff(input, backups); diff != "" {
					t.Fatalf("%s: Plan changed its input (-before +after):\n%s", where, diff)
				}
				checkInvariants(t, where, backups, ds)

				if diff := diffDecisions(oraclePlan(backups, p, now), ds); diff != "" {
					t.Fatalf("%s: Plan differs from the plain restatement of the rules (-oracle +plan):\n%s", where, diff)
				}

				// Each rule alone keeps a subset of what all of them keep.
				kept := keptSet(ds)
				for _, alone := range singleRules(p) {
					for id := range keptSet(mustPlan(t, backups, alone, now)) {
						if !kept[id] {
							t.Fatalf("%s: %s alone keeps %s, the whole policy deletes it", where, alone, id)
						}
					}
				}

				// Pruning twice changes nothing: planning over the
				// survivors keeps them all, for the same reasons.
				var survivors []Backup
				keptDecisions := []Decision{}
				for _, d := range ds {
					if d.Keep {
						survivors = append(survivors, d.Backup)
						keptDecisions = append(keptDecisions, d)
					}
				}
				again := mustPlan(t, survivors, p, now)
				if diff := diffDecisions(keptDecisions, again); diff != "" {
					t.Fatalf("%s: planning over the survivors changed the plan (-first +second):\n%s", where, diff)
				}

				// Deterministic: the input order does not matter.
				rng.Shuffle(len(backups), func(i, j int) { backups[i], backups[j] = backups[j], backups[i] })
				if diff := diffDecisions(ds, mustPlan(t, backups, p, now)); diff != "" {
					t.Fatalf("%s: shuffled input changed the plan (-first +shuffled):\n%s", where, diff)
				}
			}
		})
	}
}

// singleRules returns one policy per rule that p turns on, with p's zone.
func singleRules(p Policy) []Policy {
	var out []Policy
	for _, q := range []Policy{
		{Last: p.Last}, {Hourly: p.Hourly}, {Daily: p.Daily}, {Weekly: p.Weekly},
		{Monthly: p.Monthly}, {Yearly: p.Yearly}, {Within: p.Within},
	} {
		if q.Validate() == nil {
			q.Location = p.Location
			out = append(out, q)
		}
	}
	return out
}

// checkInvariants checks what must hold for any plan, whatever the policy.
func checkInvariants(t *testing.T, where string, backups []Backup, ds []Decision) {
	t.Helper()
	if len(ds) != len(backups) {
		t.Fatalf("%s: %d decisions for %d backups", where, len(ds), len(backups))
	}
	ids := make(map[string]bool, len(backups))
	for _, b := range backups {
		ids[b.ID] = true
	}
	newestProven := -1
	for i, d := range ds {
		if !ids[d.Backup.ID] {
			t.Fatalf("%s: decision %d is for %s, not an input backup (or a repeat)", where, i, describe(d.Backup))
		}
		delete(ids, d.Backup.ID)
		if d.Keep != (len(d.Reasons) > 0) {
			t.Fatalf("%s: %s: keep=%v with reasons %q", where, describe(d.Backup), d.Keep, d.Reasons)
		}
		if d.Backup.Locked && !d.Keep {
			t.Fatalf("%s: locked backup %s is deleted", where, describe(d.Backup))
		}
		if i > 0 {
			prev := ds[i-1].Backup
			if prev.Time.Before(d.Backup.Time) || prev.Time.Equal(d.Backup.Time) && prev.ID < d.Backup.ID {
				t.Fatalf("%s: %s listed before %s: not newest first", where, describe(prev), describe(d.Backup))
			}
		}
		if d.Backup.DrillPassed && newestProven < 0 {
			newestProven = i
		}
	}
	if len(ds) > 0 && !ds[0].Keep {
		t.Fatalf("%s: the newest backup %s is deleted", where, describe(ds[0].Backup))
	}
	if newestProven >= 0 && !ds[newestProven].Keep {
		t.Fatalf("%s: the newest proven backup %s is deleted", where, describe(ds[newestProven].Backup))
	}
}

// TestPlanDSTAndOddZones runs dense backups across the daylight saving
// changes of zones where wall-clock hours repeat or move by half an hour,
// and checks Plan against the oracle rule by rule.
func TestPlanDSTAndOddZones(t *testing.T) {
	tests := []struct {
		zone  string
		start string
	}{
		{"Europe/Berlin", "2026-10-24T20:00:00Z"},
		{"Europe/Berlin", "2026-03-28T20:00:00Z"},
		{"America/Santiago", "2026-04-04T20:00:00Z"},
		{"America/Santiago", "2026-09-05T20:00:00Z"},
		{"Australia/Lord_Howe", "2026-04-04T10:00:00Z"},
		{"Australia/Lord_Howe", "2026-10-03T10:00:00Z"},
		{"Pacific/Chatham", "2026-04-04T10:00:00Z"},
	}
	for _, tt := range tests {
		t.Run(tt.zone+"/"+tt.start[:10], func(t *testing.T) {
			loc := mustLoad(t, tt.zone)
			bs := series(mustTime(t, tt.start), 12*6, 10*time.Minute)
			now := bs[len(bs)-1].Time.Add(time.Hour)
			for _, p := range []Policy{
				{Hourly: Unlimited, Location: loc},
				{Hourly: 5, Location: loc},
				{Daily: Unlimited, Location: loc},
				{Hourly: 8, Daily: 2, Location: loc},
			} {
				ds := mustPlan(t, bs, p, now)
				if diff := cmp.Diff(oraclePlan(bs, p, now), ds); diff != "" {
					t.Errorf("%s: Plan differs from the oracle (-oracle +plan):\n%s", p, diff)
				}
			}
		})
	}
}

func TestPlanEdgeCases(t *testing.T) {
	now := mustTime(t, "2026-11-30T12:00:00Z")
	at := now.Add(-time.Hour)
	tests := []struct {
		name    string
		backups []Backup
		policy  Policy
		want    []Decision
	}{
		{
			name:   "no backups",
			policy: Policy{Last: 3},
			want:   []Decision{},
		},
		{
			name:    "one backup is the newest and kept",
			backups: []Backup{{ID: "a", Time: at}},
			policy:  Policy{Daily: 1},
			want:    []Decision{{Backup: Backup{ID: "a", Time: at}, Keep: true, Reasons: []string{"daily 2026-11-30", "newest"}}},
		},
		{
			name:    "newest is also the newest proven",
			backups: []Backup{{ID: "a", Time: at, DrillPassed: true}, {ID: "b", Time: at.Add(-time.Hour)}},
			policy:  Policy{Within: time.Minute},
			want: []Decision{
				{Backup: Backup{ID: "a", Time: at, DrillPassed: true}, Keep: true, Reasons: []string{"newest", "newest-proven"}},
				{Backup: Backup{ID: "b", Time: at.Add(-time.Hour)}},
			},
		},
		{
			name: "an unknown drill newer than the newest proven may be the newest proven",
			backups: []Backup{
				{ID: "a", Time: at}, {ID: "u", Time: at.Add(-time.Hour), DrillUnknown: true},
				{ID: "p", Time: at.Add(-2 * time.Hour), DrillPassed: true},
				{ID: "o", Time: at.Add(-3 * time.Hour), DrillUnknown: true}, {ID: "f", Time: at.Add(-4 * time.Hour)},
			},
			policy: Policy{Within: time.Minute},
			want: []Decision{
				{Backup: Backup{ID: "a", Time: at}, Keep: true, Reasons: []string{"newest"}},
				{Backup: Backup{ID: "u", Time: at.Add(-time.Hour), DrillUnknown: true}, Keep: true, Reasons: []string{"drill-unknown"}},
				{Backup: Backup{ID: "p", Time: at.Add(-2 * time.Hour), DrillPassed: true}, Keep: true, Reasons: []string{"newest-proven"}},
				{Backup: Backup{ID: "o", Time: at.Add(-3 * time.Hour), DrillUnknown: true}},
				{Backup: Backup{ID: "f", Time: at.Add(-4 * time.Hour)}},
			},
		},
		{
			name:    "no proven backup: every unknown drill may be the newest proven",
			backups: []Backup{{ID: "a", Time: at, DrillUnknown: true}, {ID: "b", Time: at.Add(-time.Hour)}, {ID: "c", Time: at.Add(-2 * time.Hour), DrillUnknown: true}},
			policy:  Policy{Within: time.Minute},
			want: []Decision{
				{Backup: Backup{ID: "a", Time: at, DrillUnknown: true}, Keep: true, Reasons: []string{"newest", "drill-unknown"}},
				{Backup: Backup{ID: "b", Time: at.Add(-time.Hour)}},
				{Backup: Backup{ID: "c", Time: at.Add(-2 * time.Hour), DrillUnknown: true}, Keep: true, Reasons: []string{"drill-unknown"}},
			},
		},
		{
			name:    "within keeps a backup from the future",
			backups: []Backup{{ID: "late", Time: now.Add(time.Hour)}, {ID: "a", Time: now.Add(-time.Minute)}, {ID: "b", Time: now.Add(-time.Hour)}},
			policy:  Policy{Within: 30 * time.Minute},
			want: []Decision{
				{Backup: Backup{ID: "late", Time: now.Add(time.Hour)}, Keep: true, Reasons: []string{"within 30m", "newest"}},
				{Backup: Backup{ID: "a", Time: now.Add(-time.Minute)}, Keep: true, Reasons: []string{"within 30m"}},
				{Backup: Backup{ID: "b", Time: now.Add(-time.Hour)}},
			},
		},
		{
			name:    "last unlimited keeps all",
			backups: []Backup{{ID: "a", Time: at}, {ID: "b", Time: at.Add(-day)}},
			policy:  Policy{Last: Unlimited},
			want: []Decision{
				{Backup: Backup{ID: "a", Time: at}, Keep: true, Reasons: []string{"last", "newest"}},
				{Backup: Backup{ID: "b", Time: at.Add(-day)}, Keep: true, Reasons: []string{"last"}},
			},
		},
		{
			name:    "years before 1000 and after 9999",
			backups: []Backup{{ID: "far", Time: time.Date(12345, 1, 2, 3, 0, 0, 0, time.UTC)}, {ID: "zero", Time: time.Date(5, 6, 7, 8, 0, 0, 0, time.UTC)}},
			policy:  Policy{Hourly: Unlimited, Weekly: Unlimited, Yearly: Unlimited},
			want: []Decision{
				{Backup: Backup{ID: "far", Time: time.Date(12345, 1, 2, 3, 0, 0, 0, time.UTC)}, Keep: true, Reasons: []string{"hourly 12345-01-02 03:00", "weekly 12345-W01", "yearly 12345", "newest"}},
				{Backup: Backup{ID: "zero", Time: time.Date(5, 6, 7, 8, 0, 0, 0, time.UTC)}, Keep: true, Reasons: []string{"hourly 0005-06-07 08:00", "weekly 0005-W23", "yearly 0005"}},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mustPlan(t, tt.backups, tt.policy, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlanErrors(t *testing.T) {
	now := mustTime(t, "2026-11-30T12:00:00Z")
	tests := []struct {
		name    string
		backups []Backup
		policy  Policy
		want    string
	}{
		{"empty policy", nil, Policy{}, "retention policy keeps nothing: set at least one keep-* rule"},
		{"zone alone keeps nothing", nil, Policy{Location: time.UTC}, "keeps nothing"},
		{"bad count", nil, Policy{Weekly: -2}, "keep-weekly -2"},
		{"duplicate id", []Backup{{ID: "x", Time: now}, {ID: "y", Time: now}, {ID: "x", Time: now.Add(-day)}}, Policy{Last: 1}, `backup id "x" listed twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds, err := Plan(tt.backups, tt.policy, now)
			if err == nil {
				t.Fatalf("Plan = %d decisions, want an error containing %q", len(ds), tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Plan error = %q, want it to contain %q", err, tt.want)
			}
		})
	}
}

// diffDecisions is cmp.Diff(want, got), with a fast path for the equal
// case: cmp's reflection is too slow for thousands of random plans.
func diffDecisions(want, got []Decision) string {
	if len(want) == len(got) && (want == nil) == (got == nil) {
		same := true
		for i := range want {
			w, g := want[i], got[i]
			if w.Backup.ID != g.Backup.ID || !w.Backup.Time.Equal(g.Backup.Time) || w.Backup.Size != g.Backup.Size ||
				w.Backup.DrillPassed != g.Backup.DrillPassed || w.Backup.DrillUnknown != g.Backup.DrillUnknown || w.Backup.Locked != g.Backup.Locked ||
				w.Keep != g.Keep || !slices.Equal(w.Reasons, g.Reasons) || (w.Reasons == nil) != (g.Reasons == nil) {
				same = false
				break
			}
		}
		if same {
			return ""
		}
	}
	return cmp.Diff(want, got)
}
