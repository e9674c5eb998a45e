package retention

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// render prints a plan for a golden file: a header, how many backups each
// rule kept, then one line per kept backup (and per deleted one when
// listDeleted), newest first, times in the policy's zone.
func render(backups []Backup, p Policy, now time.Time, ds []Decision, listDeleted bool) string {
	loc := p.Location
	if loc == nil {
		loc = time.UTC
	}
	var b strings.Builder
	kept := len(keptIDs(ds))
	fmt.Fprintf(&b, "policy:   %s\n", p)
	fmt.Fprintf(&b, "location: %s\n", locName(p.Location))
	fmt.Fprintf(&b, "now:      %s\n", now.In(loc).Format(time.RFC3339))
	fmt.Fprintf(&b, "backups:  %d, kept %d, deleted %d\n", len(backups), kept, len(ds)-kept)
	rules := byRule(ds)
	names := make([]string, 0, len(rules))
	for name := range rules {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fmt.Fprintf(&b, "  %-13s kept %d\n", name, len(rules[name]))
	}
	b.WriteString("\n")
	for _, d := range ds {
		if !d.Keep && !listDeleted {
			continue
		}
		verdict := "delete"
		if d.Keep {
			verdict = "keep"
		}
		line := fmt.Sprintf("%-6s %-24s %s  %s", verdict, d.Backup.ID, d.Backup.Time.In(loc).Format(time.RFC3339), strings.Join(d.Reasons, ", "))
		b.WriteString(strings.TrimRight(line, " ") + "\n")
	}
	return b.String()
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run go test -update to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("plan differs from %s (-want +got); if the change is intended, run go test -update:\n%s", path, diff)
	}
}

// yearOfHourly is a year of hourly backups, 2025-12-01 00:00 to 2026-11-30
// 23:00 UTC. Drills passed for the 03:00 backup of each day until
// 2026-11-20 and failed since; two backups are under Object Lock.
func yearOfHourly(t testing.TB) []Backup {
	start := mustTime(t, "2025-12-01T00:00:00Z")
	bs := series(start, 365*24, time.Hour)
	lastProven := mustTime(t, "2026-11-20T03:00:00Z")
	locked := map[string]bool{
		"2026-03-15T12:00:00Z": true, // kept by nothing but the lock
		"2026-06-30T23:00:00Z": true, // also June's monthly pick in UTC
	}
	for i := range bs {
		at := bs[i].Time
		bs[i].DrillPassed = at.Hour() == 3 && !at.After(lastProven)
		bs[i].Locked = locked[at.Format(time.RFC3339)]
	}
	return bs
}

func TestPlanGolden(t *testing.T) {
	berlin := mustLoad(t, "Europe/Berlin")
	gfs := Policy{Last: 5, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 3}
	gfsBerlin := gfs
	gfsBerlin.Location = berlin

	// Backups on both sides of midnight UTC; in Berlin (UTC+1 in
	// November) the 23:30 UTC ones belong to the next day.
	var midnight []Backup
	for i, s := range []string{
		"2026-11-26T22:30:00Z", "2026-11-26T23:30:00Z", "2026-11-27T00:30:00Z",
		"2026-11-27T22:30:00Z", "2026-11-27T23:30:00Z", "2026-11-28T00:30:00Z",
		"2026-11-28T22:30:00Z", "2026-11-28T23:30:00Z", "2026-11-29T00:30:00Z",
	} {
		at := mustTime(t, s)
		midnight = append(midnight, Backup{ID: backupID(at, 100+i), Time: at})
	}

	// Every 20 minutes across the end of summer time in Berlin,
	// 2026-10-25 03:00 CEST -> 02:00 CET: 02:00-03:00 happens twice.
	fallBack := series(mustTime(t, "2026-10-24T23:00:00Z"), 13, 20*time.Minute)

	// Daily at noon across new year: 2027-01-01..03 belong to ISO week
	// 2026-W53.
	newYear := series(mustTime(t, "2026-12-20T12:00:00Z"), 22, 24*time.Hour)

	// Every other day: empty days are not buckets, so keep-daily 5 spans
	// ten days.
	sparse := series(mustTime(t, "2026-11-01T06:00:00Z"), 15, 48*time.Hour)

	// Every 6 hours for 5 days and one from a skewed clock an hour ahead.
	now := mustTime(t, "2026-11-30T12:00:00Z")
	within := series(now.Add(-5*24*time.Hour), 20, 6*time.Hour)
	future := now.Add(time.Hour)
	within = append(within, Backup{ID: backupID(future, 9999), Time: future})

	// Guarantees only: the newest is unproven, two older ones are proven,
	// two are locked.
	guard := series(mustTime(t, "2026-11-20T01:00:00Z"), 10, 24*time.Hour)
	for _, i := range []int{2, 5} {
		guard[i].DrillPassed = true
	}
	for _, i := range []int{1, 7} {
		guard[i].Locked = true
	}

	// Equal times: ties go to the larger id.
	tieAt := mustTime(t, "2026-11-30T00:00:00Z")
	var ties []Backup
	for _, id := range []string{"b", "d", "a", "c"} {
		ties = append(ties, Backup{ID: id, Time: tieAt})
	}
	ties = append(ties, Backup{ID: "z", Time: tieAt.Add(-time.Hour)})

	tests := []struct {
		name        string
		backups     []Backup
		policy      Policy
		now         time.Time
		listDeleted bool
	}{
		{"year-hourly-gfs-utc", yearOfHourly(t), gfs, mustTime(t, "2026-11-30T23:30:00Z"), false},
		{"year-hourly-gfs-berlin", yearOfHourly(t), gfsBerlin, mustTime(t, "2026-11-30T23:30:00Z"), false},
		{"midnight-daily-utc", midnight, Policy{Daily: 3}, now, true},
		{"midnight-daily-berlin", midnight, Policy{Daily: 3, Location: berlin}, now, true},
		{"dst-fall-back-hourly-berlin", fallBack, Policy{Hourly: Unlimited, Location: berlin}, now, true},
		{"iso-week-new-year", newYear, Policy{Weekly: 3, Monthly: 2, Yearly: 2}, mustTime(t, "2027-01-11T00:00:00Z"), true},
		{"sparse-daily", sparse, Policy{Daily: 5}, now, true},
		{"within-2d-and-future", within, Policy{Last: 1, Within: 2 * day}, now, true},
		{"guarantees", guard, Policy{Last: 1}, now, true},
		{"equal-times", ties, Policy{Last: 2}, now, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := mustPlan(t, tt.backups, tt.policy, tt.now)
			checkGolden(t, tt.name, render(tt.backups, tt.policy, tt.now, ds, tt.listDeleted))
		})
	}
}

// TestPlanYearOfHourly pins the worked example by hand, independent of the
// golden file: which backups each rule keeps.
func TestPlanYearOfHourly(t *testing.T) {
	bs := yearOfHourly(t)
	p := Policy{Last: 5, Hourly: 24, Daily: 7, Weekly: 4, Monthly: 12, Yearly: 3}
	ds := mustPlan(t, bs, p, mustTime(t, "2026-11-30T23:30:00Z"))

	id := func(s string) string {
		at := mustTime(t, s)
		return backupID(at, 1000+int(at.Sub(bs[0].Time)/time.Hour)*10)
	}
	var lastHours []string
	for h := 23; h >= 0; h-- {
		lastHours = append(lastHours, id(fmt.Sprintf("2026-11-30T%02d:00:00Z", h)))
	}
	var lastDays []string
	for d := 30; d >= 24; d-- {
		lastDays = append(lastDays, id(fmt.Sprintf("2026-11-%02dT23:00:00Z", d)))
	}
	want := map[string][]string{
		"last":   lastHours[:5],
		"hourly": lastHours,
		"daily":  lastDays,
		// 2026-11-30 is a Monday: this week has one day so far.
		"weekly": {id("2026-11-30T23:00:00Z"), id("2026-11-29T23:00:00Z"), id("2026-11-22T23:00:00Z"), id("2026-11-15T23:00:00Z")},
		"monthly": {
			id("2026-11-30T23:00:00Z"), id("2026-10-31T23:00:00Z"), id("2026-09-30T23:00:00Z"), id("2026-08-31T23:00:00Z"),
			id("2026-07-31T23:00:00Z"), id("2026-06-30T23:00:00Z"), id("2026-05-31T23:00:00Z"), id("2026-04-30T23:00:00Z"),
			id("2026-03-31T23:00:00Z"), id("2026-02-28T23:00:00Z"), id("2026-01-31T23:00:00Z"), id("2025-12-31T23:00:00Z"),
		},
		// Only two years hold backups: keep-yearly 3 keeps two.
		"yearly":        {id("2026-11-30T23:00:00Z"), id("2025-12-31T23:00:00Z")},
		"newest":        {id("2026-11-30T23:00:00Z")},
		"newest-proven": {id("2026-11-20T03:00:00Z")},
		"locked":        {id("2026-06-30T23:00:00Z"), id("2026-03-15T12:00:00Z")},
	}
	if diff := cmp.Diff(want, byRule(ds)); diff != "" {
		t.Errorf("kept by rule (-want +got):\n%s", diff)
	}
	// 24 hours + 6 more days + 2 more weeks + 11 more months + the proven
	// and the lock-only backup.
	if got, want := len(keptIDs(ds)), 24+6+2+11+2; got != want {
		t.Errorf("kept %d backups, want %d", got, want)
	}
}

// TestPlanTimeZone shows the zone moving day boundaries: 23:30 UTC is
// 00:30 the next day in Berlin.
func TestPlanTimeZone(t *testing.T) {
	var bs []Backup
	for i, s := range []string{"2026-11-28T22:30:00Z", "2026-11-28T23:30:00Z", "2026-11-29T00:30:00Z"} {
		bs = append(bs, Backup{ID: fmt.Sprintf("b%d-%s", i, s[11:16]), Time: mustTime(t, s)})
	}
	now := mustTime(t, "2026-11-30T00:00:00Z")
	tests := []struct {
		loc  *time.Location
		want []Decision
	}{
		{nil, []Decision{
			{Backup: bs[2], Keep: true, Reasons: []string{"daily 2026-11-29", "newest"}},
			{Backup: bs[1], Keep: true, Reasons: []string{"daily 2026-11-28"}},
			{Backup: bs[0]},
		}},
		{mustLoad(t, "Europe/Berlin"), []Decision{
			{Backup: bs[2], Keep: true, Reasons: []string{"daily 2026-11-29", "newest"}},
			{Backup: bs[1]},
			{Backup: bs[0], Keep: true, Reasons: []string{"daily 2026-11-28"}},
		}},
		{mustLoad(t, "America/New_York"), []Decision{
			{Backup: bs[2], Keep: true, Reasons: []string{"daily 2026-11-28", "newest"}},
			{Backup: bs[1]},
			{Backup: bs[0]},
		}},
	}
	for _, tt := range tests {
		t.Run(locName(tt.loc), func(t *testing.T) {
			got := mustPlan(t, bs, Policy{Daily: 2, Location: tt.loc}, now)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Plan (-want +got):\n%s", diff)
			}
		})
	}
}
