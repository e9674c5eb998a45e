package retention

import (
	"fmt"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the zones below must not depend on the host's zoneinfo
)

// backupID is the store's id format: UTC time, then the etcd revision.
func backupID(t time.Time, rev int) string {
	return t.UTC().Format("20060102T150405Z") + "-r" + strconv.Itoa(rev)
}

// series returns n backups from start, one every step, oldest first.
func series(start time.Time, n int, step time.Duration) []Backup {
	out := make([]Backup, n)
	for i := range out {
		at := start.Add(time.Duration(i) * step)
		out[i] = Backup{ID: backupID(at, 1000+i*10), Time: at, Size: int64(1 << 20)}
	}
	return out
}

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("load time zone %s: %v", name, err)
	}
	return loc
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	at, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatalf("parse time %s: %v", s, err)
	}
	return at
}

func mustPlan(t testing.TB, backups []Backup, p Policy, now time.Time) []Decision {
	t.Helper()
	ds, err := Plan(backups, p, now)
	if err != nil {
		t.Fatalf("Plan(%d backups, %s): %v", len(backups), p, err)
	}
	return ds
}

// keptIDs returns the ids of the kept backups, newest first.
func keptIDs(ds []Decision) []string {
	var ids []string
	for _, d := range ds {
		if d.Keep {
			ids = append(ids, d.Backup.ID)
		}
	}
	return ids
}

// byRule returns, for each rule name (the reason's first word), the ids it
// kept, newest first.
func byRule(ds []Decision) map[string][]string {
	out := make(map[string][]string)
	for _, d := range ds {
		for _, r := range d.Reasons {
			name := r
			for i := range len(r) {
				if r[i] == ' ' {
					name = r[:i]
					break
				}
			}
			out[name] = append(out[name], d.Backup.ID)
		}
	}
	return out
}

func locName(loc *time.Location) string {
	if loc == nil {
		return "UTC"
	}
	return loc.String()
}

func describe(b Backup) string {
	return fmt.Sprintf("%s %s", b.ID, b.Time.Format(time.RFC3339Nano))
}
