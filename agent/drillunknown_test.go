package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestStatusDrillUnknown: the newest backup's newest drill report cannot
// be read (an older one says passed). /status and the newest-proven gauge
// must not count it as proven: the newest proven backup is the older one
// whose last drill passed, /status names the unknown one with the error,
// and the last drill's result is absent rather than an older verdict.
func TestStatusDrillUnknown(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: d, Cluster: testCluster}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	older := jobtest.PutBackup(t, b, now.Add(-2*time.Hour), uploader.PutOptions{}, false)
	newest := jobtest.PutBackup(t, b, now.Add(-time.Hour), uploader.PutOptions{}, false)
	report := func(id string, start time.Time) {
		t.Helper()
		r := &repository.DrillReport{Format: repository.DrillReportFormat, BackupID: id, Cluster: testCluster,
			StartedAt: start, FinishedAt: start.Add(time.Second), Passed: true, AgentVersion: "test"}
		if err := b.PutDrillReport(t.Context(), r); err != nil {
			t.Fatal(err)
		}
	}
	report(older.ID, now.Add(-50*time.Minute))
	report(newest.ID, now.Add(-40*time.Minute))
	unreadable := b.DrillReportKey(newest.ID, now.Add(-30*time.Minute))
	if err := os.Symlink(t.TempDir(), filepath.Join(d.Root(), filepath.FromSlash(unreadable))); err != nil {
		t.Fatal(err)
	}

	lg, _ := testLogger(t)
	a, err := New(Config{Backups: b, Clock: newFakeClock(now), Version: "test"}, lg)
	if err != nil {
		t.Fatal(err)
	}
	a.refresh(t.Context())
	st := a.Status(t.Context())
	if st.NewestProvenBackup == nil || st.NewestProvenBackup.ID != older.ID {
		t.Errorf("/status newest_proven_backup = %+v; want %s", st.NewestProvenBackup, older.ID)
	}
	if len(st.DrillUnknown) != 1 || st.DrillUnknown[0].BackupID != newest.ID || !strings.Contains(st.DrillUnknown[0].Error, unreadable) {
		t.Errorf("/status drill_unknown = %+v; want %s with an error naming %s", st.DrillUnknown, newest.ID, unreadable)
	}
	mfs := gather(t, a.Registry())
	if got := must(t, mfs, "lifeboat_backup_newest_proven_timestamp_seconds"); got != unixSeconds(older.CreatedAt) {
		t.Errorf("newest proven gauge = %v; want %v (%s)", got, unixSeconds(older.CreatedAt), older.ID)
	}
	if v, ok := value(mfs, "lifeboat_drill_last_result"); ok {
		t.Errorf("lifeboat_drill_last_result = %v; want absent (the last verdict is unknown)", v)
	}
}
