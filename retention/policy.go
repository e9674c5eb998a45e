package retention

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Unlimited as a rule's count keeps one backup in every bucket (or, for
// keep-last, every backup).
const Unlimited = -1

// Policy says which backups to keep. A count of 0 turns its rule off and
// [Unlimited] (-1) keeps every bucket. The zero Policy keeps nothing and is
// invalid.
type Policy struct {
	Last    int // keep-last N: the N newest backups
	Hourly  int // keep-hourly N: the newest backup of each of the N most recent hours holding one
	Daily   int // keep-daily N: likewise for days
	Weekly  int // keep-weekly N: likewise for ISO 8601 weeks (Monday to Sunday)
	Monthly int // keep-monthly N: likewise for months
	Yearly  int // keep-yearly N: likewise for years

	// Within keeps every backup younger than this (keep-within); 0 turns
	// the rule off.
	Within time.Duration

	// ChangesWithin keeps the change segments of every capture
	// generation whose window overlaps the last ChangesWithin, and the
	// snapshots they start from (see PlanChanges). 0 keeps the segments
	// of every generation whose anchor snapshot the other rules keep.
	ChangesWithin time.Duration

	// Location is the time zone of the calendar buckets; nil means UTC. It
	// is not part of what String prints.
	Location *time.Location
}

// countRules lists the count rules in their canonical order, the order of
// String, of Validate's checks and of a decision's reasons.
var countRules = [...]string{"last", "hourly", "daily", "weekly", "monthly", "yearly"}

// counts returns pointers to the count fields, in countRules order.
func (p *Policy) counts() [len(countRules)]*int {
	return [...]*int{&p.Last, &p.Hourly, &p.Daily, &p.Weekly, &p.Monthly, &p.Yearly}
}

// Validate reports whether the policy can be applied. It names the rule that
// is wrong. A policy that keeps nothing is an error: deleting every backup
// but the newest is never what an operator means by leaving the policy empty.
func (p Policy) Validate() error {
	keeps := p.Within > 0
	for i, n := range p.counts() {
		switch {
		case *n < Unlimited:
			return fmt.Errorf("retention keep-%s %d: want a count >= 0, or -1 for unlimited", countRules[i], *n)
		case *n != 0:
			keeps = true
		}
	}
	if p.Within < 0 {
		return fmt.Errorf("retention keep-within %s: must not be negative", formatDuration(p.Within))
	}
	if p.ChangesWithin < 0 {
		return fmt.Errorf("retention changes-within %s: must not be negative", formatDuration(p.ChangesWithin))
	}
	if !keeps {
		return errors.New("retention policy keeps nothing: set at least one keep-* rule")
	}
	return nil
}

// String returns the policy as "keep-last 3, keep-daily 7, keep-within 2d",
// listing the rules that are on in a fixed order (prune's report and logs
// show it). The location is not included.
func (p Policy) String() string {
	var parts []string
	for i, n := range p.counts() {
		switch {
		case *n == Unlimited:
			parts = append(parts, "keep-"+countRules[i]+" unlimited")
		case *n != 0:
			parts = append(parts, "keep-"+countRules[i]+" "+strconv.Itoa(*n))
		}
	}
	if p.Within != 0 {
		parts = append(parts, "keep-within "+formatDuration(p.Within))
	}
	if p.ChangesWithin != 0 {
		parts = append(parts, "changes-within "+formatDuration(p.ChangesWithin))
	}
	if len(parts) == 0 {
		return "keep nothing"
	}
	return strings.Join(parts, ", ")
}
