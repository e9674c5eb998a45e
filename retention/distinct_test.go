package retention

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestPlanKeepLastCountsDistinctStates: an idle cluster's identical backups
// (same revision and HashKV) must not push distinct older states out of
// keep-last (issue 29).
func TestPlanKeepLastCountsDistinctStates(t *testing.T) {
	start := mustTime(t, "2026-12-01T00:00:00Z")
	bs := series(start, 5, time.Hour)
	bs[0].State = "a/1000/0000000a"
	bs[1].State = "a/1010/0000000b"
	// The three newest are one state: the cluster was idle.
	for i := 2; i < 5; i++ {
		bs[i].State = "a/1020/0000000c"
	}
	now := start.Add(5 * time.Hour)
	ds := mustPlan(t, bs, Policy{Last: 3}, now)
	got := byRule(ds)["last"]
	want := []string{bs[4].ID, bs[1].ID, bs[0].ID}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kept by last (-want +got):\n%s", diff)
	}
	// The twins of the newest are not kept by keep-last.
	if diff := cmp.Diff([]string{bs[4].ID, bs[1].ID, bs[0].ID}, keptIDs(ds)); diff != "" {
		t.Errorf("kept (-want +got):\n%s", diff)
	}
}

// TestPlanKeepLastUnknownStatesAreDistinct: a backup without a state (an
// old manifest) is a state of its own.
func TestPlanKeepLastUnknownStatesAreDistinct(t *testing.T) {
	start := mustTime(t, "2026-12-01T00:00:00Z")
	bs := series(start, 4, time.Hour)
	ds := mustPlan(t, bs, Policy{Last: 3}, start.Add(4*time.Hour))
	if got, want := len(byRule(ds)["last"]), 3; got != want {
		t.Errorf("kept by last: %d, want %d", got, want)
	}
}
