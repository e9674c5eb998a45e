package repository

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

func testReport(id string, start time.Time, passed bool) *DrillReport {
	r := &DrillReport{
		Format: DrillReportFormat, BackupID: id, Cluster: "c1",
		StartedAt: start, FinishedAt: start.Add(3 * time.Second),
		Phases: []Phase{{Name: "fetch", Seconds: 1}, {Name: "boot", Seconds: 2}},
		Checks: []Check{{Name: "revision", Expected: "42", Actual: "42", Passed: true}},
		Passed: passed, RecoverySeconds: 3, AgentVersion: "test",
	}
	if !passed {
		r.Checks = append(r.Checks, Check{Name: "hashkv", Expected: "0x1", Actual: "0x2"})
	}
	return r
}

func TestDrillReports(t *testing.T) {
	b := newDirBackups(t)
	ctx := t.Context()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const a, c = "20261130T113800Z-r42", "20261130T123800Z-r50"
	reports := []*DrillReport{
		testReport(a, t0, true),
		testReport(a, t0.Add(time.Hour), false),
		testReport(a, t0.Add(time.Hour+time.Millisecond), true),
		testReport(c, t0.Add(2*time.Hour), false),
	}
	for _, r := range reports {
		if err := b.PutDrillReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	// Stray objects are skipped (an unreadable newest report: see
	// TestLastDrillsNewestUnreadable).
	for _, k := range []string{"c1/drills/not-an-id/x.json", "c1/drills/" + c + "/note.txt"} {
		if _, err := b.Store.Put(ctx, k, strings.NewReader("{"), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	got := storedReports(t, b, a)
	want := []*DrillReport{reports[2], reports[1], reports[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reports of %s mismatch (-want +got):\n%s", a, diff)
	}

	last, err := b.LastDrills(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]*LastDrill{
		a: {DrillReport: reports[2], Key: b.DrillReportKey(a, reports[2].StartedAt), Started: reports[2].StartedAt},
		c: {DrillReport: reports[3], Key: b.DrillReportKey(c, reports[3].StartedAt), Started: reports[3].StartedAt},
	}, last); diff != "" {
		t.Errorf("LastDrills mismatch (-want +got):\n%s", diff)
	}
	if k := b.DrillReportKey(a, t0); k != "c1/drills/"+a+"/20261201T100000.000Z.json" {
		t.Errorf("DrillReportKey = %s", k)
	}
}

func TestLastDrillsEmpty(t *testing.T) {
	b := newDirBackups(t)
	got, err := b.LastDrills(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("LastDrills of an empty store = %v", got)
	}
}

func TestParseDrillReport(t *testing.T) {
	good := testReport("20261130T113800Z-r42", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), false)
	data, err := good.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseDrillReport(data)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(good, got); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	tests := []struct {
		name string
		edit func(r *DrillReport)
	}{
		{name: "format", edit: func(r *DrillReport) { r.Format = 2 }},
		{name: "backup id", edit: func(r *DrillReport) { r.BackupID = "../x" }},
		{name: "no start", edit: func(r *DrillReport) { r.StartedAt = time.Time{} }},
		{name: "finished before start", edit: func(r *DrillReport) { r.FinishedAt = r.StartedAt.Add(-time.Second) }},
		{name: "passed with failed check", edit: func(r *DrillReport) { r.Passed = true }},
		{name: "passed with error", edit: func(r *DrillReport) { r.Checks = r.Checks[:1]; r.Passed = true; r.Error = "x" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := *good
			r.Checks = append([]Check(nil), good.Checks...)
			tt.edit(&r)
			data, err := r.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseDrillReport(data); !errors.Is(err, ErrBadDrillReport) {
				t.Errorf("ParseDrillReport error %v, want ErrBadDrillReport", err)
			}
		})
	}
	if _, err := ParseDrillReport([]byte("not json")); !errors.Is(err, ErrBadDrillReport) {
		t.Errorf("ParseDrillReport(garbage) error %v, want ErrBadDrillReport", err)
	}
}

func FuzzParseDrillReport(f *testing.F) {
	good, _ := testReport("20261130T113800Z-r42", time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), true).Marshal()
	f.Add(good)
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`{"format":1,"backup_id":"20261130T113800Z-r1","started_at":"2026-01-01T00:00:00Z","finished_at":"2026-01-01T00:00:01Z","passed":true,"checks":[{"passed":false}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := ParseDrillReport(data)
		if err != nil {
			if !errors.Is(err, ErrBadDrillReport) {
				t.Fatalf("error %v does not wrap ErrBadDrillReport", err)
			}
			return
		}
		out, err := r.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseDrillReport(out)
		if err != nil {
			t.Fatalf("re-parse of a valid report: %v", err)
		}
		if diff := cmp.Diff(r, r2); diff != "" {
			t.Errorf("round trip changed the report:\n%s", diff)
		}
	})
}

// TestDrillReportSameStart: two drills of one backup that started in the
// same millisecond (two agents) both keep their report; neither replaces
// the other.
func TestDrillReportSameStart(t *testing.T) {
	b := newDirBackups(t)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const id = "20261130T113800Z-r42"
	first, second := testReport(id, t0, true), testReport(id, t0, false)
	for _, r := range []*DrillReport{first, second} {
		if err := b.PutDrillReport(t.Context(), r); err != nil {
			t.Fatalf("PutDrillReport: %v", err)
		}
	}
	got := storedReports(t, b, id)
	if len(got) != 2 {
		t.Fatalf("stored %d reports; want both", len(got))
	}
	passed := map[bool]int{}
	for _, r := range got {
		passed[r.Passed]++
	}
	if passed[true] != 1 || passed[false] != 1 {
		t.Errorf("stored verdicts %v; want one passed and one failed", passed)
	}
	// The report stored second (<time>-2.json) is the newest: its verdict
	// (failed) is the backup's, not the first one's.
	last, err := b.LastDrills(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if got := last[id].State(); got != DrillFailed {
		t.Errorf("LastDrills state %s from %s; want failed (the second report of the same millisecond)", got, last[id].Key)
	}
}

// storedReports reads every report of backup id as stored, newest first.
func storedReports(t *testing.T, b *Repo, id string) []*DrillReport {
	t.Helper()
	var keys []string
	err := b.Store.List(t.Context(), b.drillDir()+id+"/", func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Reverse(keys)
	var out []*DrillReport
	for _, k := range keys {
		r, err := b.readDrillReport(t.Context(), k)
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		out = append(out, r)
	}
	return out
}
