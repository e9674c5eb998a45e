package capture

import "fmt"

// checkInvariants makes handle check the capture's invariants (capt's
// doc) after every item it handles; the package's tests set it.
var checkInvariants bool

// invariants returns the first of capt's invariants that does not hold
// (nil when all hold). It runs only in the loop's goroutine, between
// items: the reader goroutine touches none of what it reads.
func (c *capt) invariants() error {
	if c.lastRev < c.g.durable {
		return fmt.Errorf("capture invariant 1: last revision %d below the durable %d", c.lastRev, c.g.durable)
	}
	if int64(len(c.pend)) != c.lastRev-c.g.durable {
		return fmt.Errorf("capture invariant 1: %d pending revisions between durable %d and last %d", len(c.pend), c.g.durable, c.lastRev)
	}
	for i, r := range c.pend {
		if want := c.g.durable + int64(i) + 1; r.Revision != want {
			return fmt.Errorf("capture invariant 1: pending revision %d at %d, want %d", r.Revision, i, want)
		}
	}
	if c.open != nil && c.open.Revision != c.lastRev+1 {
		return fmt.Errorf("capture invariant 2: assembling revision %d after %d", c.open.Revision, c.lastRev)
	}
	if c.skipRev != 0 && c.skipRev != c.lastRev {
		return fmt.Errorf("capture invariant 3: skipping through %d, last revision %d", c.skipRev, c.lastRev)
	}
	if c.knownRev > c.lastRev {
		return fmt.Errorf("capture invariant 4: known revision %d above the last %d", c.knownRev, c.lastRev)
	}
	if c.hold.Load() {
		return fmt.Errorf("capture invariant 5: holding without back-pressure after the generation started")
	}
	return nil
}

// mustHold panics when checkInvariants is set and an invariant fails: a
// test then stops at the item that broke it.
func (c *capt) mustHold() {
	if checkInvariants {
		if err := c.invariants(); err != nil {
			panic(err)
		}
	}
}
