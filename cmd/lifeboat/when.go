package main

import (
	"fmt"
	"time"

	"github.com/lifeboat-dev/lifeboat/retention"
)

// timeForms says, in every time flag's error, what a time may be: one
// syntax for --to-time, --before, --at-time (@TIME), --since and --until.
const timeForms = "an RFC 3339 time (2026-12-04T02:48:19Z), a date and time in UTC or with a zone (2026-12-04 02:48:19, 2026-12-04 02:48:19+01:00), a date (2026-12-04) or a duration ago (2m, 3h, 1d)"

// timeLayouts are the absolute forms, tried in order; those without a
// zone are UTC.
var timeLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999 -0700",
	"2006-01-02T15:04:05.999999999",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04",
	"2006-01-02",
}

// parseTime reads a time as every time flag does: an absolute time in
// one of timeLayouts, or a duration (retention's syntax, with days)
// before now. what names the flag in the error.
func parseTime(what, s string, now time.Time) (time.Time, error) {
	for _, layout := range timeLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t.UTC(), nil
		}
	}
	if d, err := retention.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d).UTC(), nil
	}
	return time.Time{}, usagef("%s %q: give %s", what, s, timeForms)
}

// resolvedTime is how a command says which time it took a time flag
// for: "2026-12-04 02:48:19 UTC (3h ago)".
func resolvedTime(t, now time.Time) string {
	return fmt.Sprintf("%s (%s ago)", t.UTC().Format("2006-01-02 15:04:05.000 UTC"), now.Sub(t).Round(time.Second))
}
