package main

import (
	"strings"
	"testing"
	"time"
)

// TestOneTimeSyntax (issue 29): --to-time, --before, --at-time/@TIME and
// --since/--until accept the same times: RFC 3339, a date and time in UTC
// or with a zone, a date, and a duration ago.
func TestOneTimeSyntax(t *testing.T) {
	now := time.Date(2026, 12, 4, 3, 0, 0, 0, time.UTC)
	inputs := []struct {
		in   string
		want time.Time
	}{
		{"2026-12-04T02:48:19Z", time.Date(2026, 12, 4, 2, 48, 19, 0, time.UTC)},
		{"2026-12-04T02:48:19.5+01:00", time.Date(2026, 12, 4, 1, 48, 19, 5e8, time.UTC)},
		{"2026-12-04 02:48:19", time.Date(2026, 12, 4, 2, 48, 19, 0, time.UTC)},
		{"2026-12-04T02:48:19", time.Date(2026, 12, 4, 2, 48, 19, 0, time.UTC)},
		{"2026-12-04 02:48:19+01:00", time.Date(2026, 12, 4, 1, 48, 19, 0, time.UTC)},
		{"2026-12-04 02:48:19 +0100", time.Date(2026, 12, 4, 1, 48, 19, 0, time.UTC)},
		{"2026-12-04 02:48", time.Date(2026, 12, 4, 2, 48, 0, 0, time.UTC)},
		{"2026-12-03", time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)},
		{"2m", now.Add(-2 * time.Minute)},
		{"3h", now.Add(-3 * time.Hour)},
		{"1d", now.Add(-24 * time.Hour)},
	}
	parsers := map[string]func(s string) (time.Time, error){
		"--to-time": func(s string) (time.Time, error) {
			tg, _, err := restoreOptions{toTime: s}.targetAt(now)
			return tg.Time, err
		},
		"--before": func(s string) (time.Time, error) { return parseBefore(s, now) },
		"--since":  func(s string) (time.Time, error) { return parseWhen("since", s, now) },
		"@TIME": func(s string) (time.Time, error) {
			tg, _, err := parseSource("@"+s, now)
			return tg.Time, err
		},
	}
	for name, parse := range parsers {
		t.Run(name, func(t *testing.T) {
			for _, tc := range inputs {
				got, err := parse(tc.in)
				if err != nil || !got.Equal(tc.want) {
					t.Errorf("%s %q = %v, %v; want %v", name, tc.in, got, err, tc.want)
				}
			}
			for _, bad := range []string{"yesterday", "-1h", "3x", "2026-13-01"} {
				_, err := parse(bad)
				if err == nil || !strings.Contains(err.Error(), "2026-12-04 02:48:19") {
					t.Errorf("%s %q: %v, want an error showing the accepted forms", name, bad, err)
				}
			}
		})
	}
}

// TestVersionFlag (issue 29): lifeboat --version answers as lifeboat
// version does.
func TestVersionFlag(t *testing.T) {
	code, out, errOut := runCLI(t, nil, "--version")
	_, want, _ := runCLI(t, nil, "version")
	if code != 0 || out != want || !strings.HasPrefix(out, "lifeboat ") {
		t.Errorf("--version: exit %d %q %q, want %q", code, out, errOut, want)
	}
}
