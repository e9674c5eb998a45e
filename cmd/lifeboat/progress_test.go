package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestProgressAtMostOncePerSecond: off a terminal, progress is log lines:
// at most one a second however fast the bytes come (issue 29).
func TestProgressAtMostOncePerSecond(t *testing.T) {
	var logs bytes.Buffer
	lg := slog.New(slog.NewJSONHandler(&logs, nil))
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	p := newProgress(&bytes.Buffer{}, lg, "download", 1000)
	p.now = func() time.Time { return now }
	for i := int64(1); i <= 1000; i++ { // all of it in one instant
		p.update(i, 0)
	}
	if n := strings.Count(logs.String(), `"msg":"download progress"`); n != 1 {
		t.Errorf("%d progress lines within a second, want 1:\n%s", n, logs.String())
	}
	logs.Reset()
	p2 := newProgress(&bytes.Buffer{}, lg, "download", 1000)
	p2.now = func() time.Time { return now }
	for i := int64(1); i <= 1000; i++ {
		now = now.Add(100 * time.Millisecond)
		p2.update(i, 0)
	}
	if n := strings.Count(logs.String(), `"msg":"download progress"`); n < 10 || n > 11 {
		t.Errorf("%d progress lines over 100 s, want one per 10 %%:\n%s", n, logs.String())
	}
}
