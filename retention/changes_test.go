package retention_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/retention"
)

// TestPlanChanges: generations are kept by changes-within (their window
// ends after the cutoff), the newest always, and with changes-within 0
// exactly those whose anchor the snapshot rules keep; every kept
// generation's anchor is kept with the reason "anchor", even when the
// snapshot rules alone would delete it.
func TestPlanChanges(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	// Backups a (10 days old), b (8d), c (3d), d (1h); generations from
	// a (window ended 9d ago), b (ended 6d ago: overlaps 7d), c (ended 2d ago).
	bs := []retention.Backup{
		{ID: "a", Time: now.Add(-10 * day)}, {ID: "b", Time: now.Add(-8 * day)},
		{ID: "c", Time: now.Add(-3 * day)}, {ID: "d", Time: now.Add(-time.Hour)},
	}
	gens := []retention.Generation{
		{ID: "c", End: now.Add(-2 * day)}, {ID: "a", End: now.Add(-9 * day)}, {ID: "b", End: now.Add(-6 * day)},
	}
	type verdict struct {
		Keep    bool
		Reasons string
	}
	for _, tc := range []struct {
		name     string
		p        retention.Policy
		backups  map[string]verdict
		gens     map[string]verdict
		policyIs string
	}{
		{
			name: "changes within 7d", p: retention.Policy{Last: 1, ChangesWithin: 7 * day},
			backups:  map[string]verdict{"a": {}, "b": {true, "anchor"}, "c": {true, "anchor"}, "d": {true, "last, newest"}},
			gens:     map[string]verdict{"a": {}, "b": {true, "changes within 7d"}, "c": {true, "changes within 7d, newest generation"}},
			policyIs: "keep-last 1, changes-within 7d",
		},
		{
			name: "changes within 0 follows the anchors", p: retention.Policy{Last: 2},
			backups:  map[string]verdict{"a": {}, "b": {}, "c": {true, "last, anchor"}, "d": {true, "last, newest"}},
			gens:     map[string]verdict{"a": {}, "b": {}, "c": {true, "newest generation"}},
			policyIs: "keep-last 2",
		},
		{
			name: "changes within 0 keeps generations of anchors kept by a rule", p: retention.Policy{Within: 9 * day},
			backups:  map[string]verdict{"a": {}, "b": {true, "within 9d"}, "c": {true, "within 9d, anchor"}, "d": {true, "within 9d, newest"}},
			gens:     map[string]verdict{"a": {}, "b": {true, "anchor kept"}, "c": {true, "newest generation"}},
			policyIs: "keep-within 9d",
		},
		{
			name: "newest generation kept however old", p: retention.Policy{Last: 1, ChangesWithin: time.Hour},
			backups:  map[string]verdict{"a": {}, "b": {}, "c": {true, "anchor"}, "d": {true, "last, newest"}},
			gens:     map[string]verdict{"a": {}, "b": {}, "c": {true, "newest generation"}},
			policyIs: "keep-last 1, changes-within 1h",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(bs)
			ds, gs, err := retention.PlanChanges(in, gens, tc.p, now)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(in, bs) {
				t.Error("PlanChanges modified its input")
			}
			got := map[string]verdict{}
			for _, d := range ds {
				got[d.Backup.ID] = verdict{d.Keep, strings.Join(d.Reasons, ", ")}
			}
			if diff := cmp.Diff(got, tc.backups); diff != "" {
				t.Errorf("backups (-got +want):\n%s", diff)
			}
			got = map[string]verdict{}
			var order []string
			for _, g := range gs {
				got[g.Generation.ID] = verdict{g.Keep, strings.Join(g.Reasons, ", ")}
				order = append(order, g.Generation.ID)
			}
			if diff := cmp.Diff(got, tc.gens); diff != "" {
				t.Errorf("generations (-got +want):\n%s", diff)
			}
			if !slices.Equal(order, []string{"a", "b", "c"}) {
				t.Errorf("generations in order %v, want oldest first", order)
			}
			if s := tc.p.String(); s != tc.policyIs {
				t.Errorf("policy %q, want %q", s, tc.policyIs)
			}
		})
	}

	if _, _, err := retention.PlanChanges(bs, []retention.Generation{{ID: "x", End: now}}, retention.Policy{Last: 1}, now); err == nil {
		t.Error("a generation without an anchor backup was planned")
	}
	if err := (retention.Policy{Last: 1, ChangesWithin: -time.Hour}).Validate(); err == nil || !strings.Contains(err.Error(), "changes-within") {
		t.Errorf("negative changes-within: %v", err)
	}
}
