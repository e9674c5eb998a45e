package repository_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func drillReport(id string, start time.Time, passed bool) *repository.DrillReport {
	r := &repository.DrillReport{
		Format: repository.DrillReportFormat, BackupID: id, Cluster: "c1",
		StartedAt: start, FinishedAt: start.Add(3 * time.Second),
		Checks: []repository.Check{{Name: "revision", Expected: "42", Actual: "42", Passed: true}},
		Passed: passed, RecoverySeconds: 3, AgentVersion: "test",
	}
	if !passed {
		r.Checks = append(r.Checks, repository.Check{Name: "hashkv", Expected: "0x1", Actual: "0x2"})
	}
	return r
}

// TestLastDrillsNewestUnreadable: when the newest report of a backup
// cannot be read (a store error, or a report this build cannot parse), its
// drill state is unknown, with the error; an older report (here: a pass)
// never stands in for it. Backups whose newest report reads fine are not
// affected.
func TestLastDrillsNewestUnreadable(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const (
		storeErr = "20261130T113800Z-r42" // newest report: read error
		badJSON  = "20261130T123800Z-r50" // newest report: not a report
		fine     = "20261130T133800Z-r60"
	)
	// setup stores a passed report of every backup, then a newer failed
	// one of fine; unreadable makes the newest report of storeErr fail
	// to read.
	setup := func(t *testing.T, b *repository.Repo) {
		for _, id := range []string{storeErr, badJSON, fine} {
			if err := b.PutDrillReport(t.Context(), drillReport(id, t0, true)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.PutDrillReport(t.Context(), drillReport(fine, t0.Add(time.Hour), false)); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Store.Put(t.Context(), b.DrillReportKey(badJSON, t0.Add(time.Hour)), strings.NewReader("{"), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	newestKey := func(b *repository.Repo) string { return b.DrillReportKey(storeErr, t0.Add(time.Hour)) }

	t.Run("dir", func(t *testing.T) {
		d, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
		if err != nil {
			t.Fatal(err)
		}
		b := repository.New(d, "c1")
		setup(t, b)
		// A report the store lists but cannot read: a symlink to a
		// directory (root reads files whatever their mode).
		p := filepath.Join(d.Root(), filepath.FromSlash(newestKey(b)))
		if err := os.Symlink(t.TempDir(), p); err != nil {
			t.Fatal(err)
		}
		checkUnknown(t, b, newestKey(b))
	})
	t.Run("s3", func(t *testing.T) {
		env := newFaultEnv(t)
		b := repository.New(env.store, "c1")
		setup(t, b)
		if err := b.PutDrillReport(t.Context(), drillReport(storeErr, t0.Add(time.Hour), false)); err != nil {
			t.Fatal(err)
		}
		env.proxy.SetFault(func(r *http.Request, _ int) s3test.Fault {
			if s3test.Op(r) == "GetObject" && strings.HasSuffix(r.URL.Path, newestKey(b)) {
				return s3test.Status(500)
			}
			return s3test.None
		})
		checkUnknown(t, b, newestKey(b))
	})
}

// checkUnknown reads the drill states twice: the second time from a warm
// cache, which must not turn the unknown into a verdict either.
func checkUnknown(t *testing.T, b *repository.Repo, unreadable string) {
	t.Helper()
	for _, round := range []string{"first", "second (cached)"} {
		last, err := b.LastDrills(t.Context())
		if err != nil {
			t.Fatalf("LastDrills, %s read: %v", round, err)
		}
		got := map[string]string{}
		for id, l := range last {
			got[id] = l.State()
			if l.State() == repository.DrillUnknown {
				got[id] += fmt.Sprintf(" (err %v, report %v)", l.Err != nil, l.DrillReport != nil)
			}
		}
		want := map[string]string{
			"20261130T113800Z-r42": "unknown (err true, report false)",
			"20261130T123800Z-r50": "unknown (err true, report false)",
			"20261130T133800Z-r60": "failed",
		}
		for id, w := range want {
			if got[id] != w {
				t.Errorf("LastDrills()[%s] state %q, %s read; want %q", id, got[id], round, w)
			}
		}
		if l := last["20261130T113800Z-r42"]; l != nil && l.Err != nil && !strings.Contains(l.Err.Error(), unreadable) {
			t.Errorf("error %q does not name the report %s", l.Err, unreadable)
		}
	}
}
