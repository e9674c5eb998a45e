package capture

import (
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestInvariantsCatch: the check every capture test runs after each item
// (checkInvariants) fails on each broken invariant, so that a passing
// capture test means they held.
func TestInvariantsCatch(t *testing.T) {
	sound := func() *capt {
		return &capt{g: &generation{durable: 10}, lastRev: 12,
			pend: []repository.Revision{{Revision: 11}, {Revision: 12}}}
	}
	if err := sound().invariants(); err != nil {
		t.Fatalf("a sound capture: %v", err)
	}
	for _, tc := range []struct {
		name    string
		breakIt func(c *capt)
		want    string
	}{
		{"last below durable", func(c *capt) { c.lastRev, c.pend = 9, nil }, "invariant 1"},
		{"a revision missing", func(c *capt) { c.pend = c.pend[1:] }, "invariant 1"},
		{"out of order", func(c *capt) { c.pend[0], c.pend[1] = c.pend[1], c.pend[0] }, "invariant 1"},
		{"open not next", func(c *capt) { c.open = &repository.Revision{Revision: 14} }, "invariant 2"},
		{"skip not last", func(c *capt) { c.skipRev = 11 }, "invariant 3"},
		{"known ahead", func(c *capt) { c.knownRev = 13 }, "invariant 4"},
		{"held after start", func(c *capt) { c.hold.Store(true) }, "invariant 5"},
	} {
		c := sound()
		tc.breakIt(c)
		if err := c.invariants(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %s", tc.name, err, tc.want)
		}
	}
}
