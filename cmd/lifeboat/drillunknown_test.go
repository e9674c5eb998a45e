package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestDrillUnknownListAndPrune: backup r29's newest drill report cannot be
// read (its older report says passed), r27's last drill passed. list shows
// r29's drill as unknown with the error, never as passed; prune keeps r29
// (it may be the newest proven) and r27 (the newest known proven), where
// it used to take r29's older pass for its verdict and delete r27.
func TestDrillUnknownListAndPrune(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f := newPruneFixture(t)
	day := func(d int) time.Time { return time.Date(2026, 11, d, 10, 0, 0, 0, time.UTC) }
	ids := map[int]string{}
	for d := 26; d <= 30; d++ {
		ids[d] = f.backup(t, day(d), int64(d)).ID
	}
	report := func(id string, start time.Time, passed bool) {
		t.Helper()
		r := &repository.DrillReport{
			Format: repository.DrillReportFormat, BackupID: id, Cluster: "c", StartedAt: start, FinishedAt: start.Add(time.Second),
			Passed: passed, AgentVersion: "test",
		}
		if !passed {
			r.Error = "hashkv differs"
		}
		if err := f.backups.PutDrillReport(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	report(ids[27], day(29), true)
	report(ids[29], day(29).Add(time.Hour), true)
	newest := f.backups.DrillReportKey(ids[29], day(30))
	// Unreadable for the store (root reads any file): a symlink to a
	// directory.
	if err := os.Symlink(t.TempDir(), filepath.Join(f.dir, filepath.FromSlash(newest))); err != nil {
		t.Fatal(err)
	}
	cfg := f.config(t)
	cfg.Retention.KeepDaily = 0
	lg := slog.New(slog.DiscardHandler)

	var out bytes.Buffer
	if err := runList(t.Context(), cfg, lg, listOptions{output: "json"}, &out, now); err != nil {
		t.Fatalf("list: %v", err)
	}
	var l listOutput
	if err := json.Unmarshal(out.Bytes(), &l); err != nil {
		t.Fatal(err)
	}
	states := map[string]string{}
	for _, b := range l.Backups {
		states[b.ID] = b.DrillState
		if b.ID == ids[29] {
			if b.LastDrill != nil || !strings.Contains(b.DrillError, newest) {
				t.Errorf("list -o json %s: last_drill %+v, drill_error %q; want null and an error naming %s", b.ID, b.LastDrill, b.DrillError, newest)
			}
		}
	}
	want := map[string]string{ids[26]: "never", ids[27]: "passed", ids[28]: "never", ids[29]: "unknown", ids[30]: "never"}
	for id, w := range want {
		if states[id] != w {
			t.Errorf("list -o json: drill_state of %s = %q; want %q", id, states[id], w)
		}
	}
	out.Reset()
	if err := runList(t.Context(), cfg, lg, listOptions{output: "table"}, &out, now); err != nil {
		t.Fatalf("list: %v", err)
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(line, ids[29]) && !strings.Contains(line, "UNKNOWN") {
			t.Errorf("list row of %s does not say UNKNOWN: %q", ids[29], line)
		}
	}
	if !strings.Contains(out.String(), "last drill of "+ids[29]+" unknown: ") {
		t.Errorf("list does not show why the drill of %s is unknown:\n%s", ids[29], out.String())
	}

	out.Reset()
	if err := runPrune(t.Context(), cfg, lg, pruneOptions{output: "json"}, &out, now); err != nil {
		t.Fatalf("prune: %v", err)
	}
	var p pruneOutput
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, b := range p.Backups {
		if b.Action == "keep" {
			kept = append(kept, b.ID+" "+strings.Join(b.Reasons, ","))
		}
	}
	wantKept := []string{ids[30] + " last,newest", ids[29] + " drill-unknown", ids[27] + " newest-proven"}
	if !slices.Equal(kept, wantKept) {
		t.Errorf("prune kept %q; want %q", kept, wantKept)
	}
}
