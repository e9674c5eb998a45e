package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestScrubJob: the scheduled scrub (agent --once) scrubs the primary and
// the copy; one byte flipped in the copy fails the job, and the scrub
// metrics say so by store: the copy's damaged object, the bytes read,
// the objects checked and the last success of each. A new agent learns
// the last success from the scrub state in the stores.
func TestScrubJob(t *testing.T) {
	lg, _ := testLogger(t)
	dirs := map[string]string{"primary": t.TempDir(), "copy1": t.TempDir()}
	repos := map[string]*repository.Repo{}
	for name, dir := range dirs {
		st, err := uploader.NewDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		repos[name] = &repository.Repo{Store: st, Cluster: testCluster}
	}
	now := time.Now().UTC().Truncate(time.Second)
	for i := range 3 {
		m := jobtest.PutBackup(t, repos["primary"], now.Add(time.Duration(i-3)*time.Hour), uploader.PutOptions{}, false)
		if i == 0 {
			// The copy holds the oldest, damaged; the copy job adds the rest.
			c := jobtest.PutBackup(t, repos["copy1"], m.CreatedAt.Add(-time.Hour), uploader.PutOptions{}, false)
			p := filepath.Join(dirs["copy1"], filepath.FromSlash(c.Object))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b[0] ^= 1
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	clock := newFakeClock(now)
	config := func() Config {
		return Config{
			Cluster: testCluster, Backups: repos["primary"],
			Scrub:     &scrub.Job{Repo: repos["primary"], ReadData: 100},
			Schedules: Schedules{Scrub: "@daily"},
			Copies: []Copy{{Name: "copy1", Job: replica.Job{Name: "copy1", From: repos["primary"], To: repos["copy1"]},
				Scrub: &scrub.Job{Repo: repos["copy1"], ReadData: 100}}},
			Clock: clock, ShutdownTimeout: 10 * time.Second, Identity: "agent-" + t.Name(), Version: "test",
		}
	}
	a, err := New(config(), lg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.RunOnce(t.Context()); err == nil {
		t.Fatal("RunOnce passed; want the scrub job to fail on the copy's damage")
	}
	mfs := gather(t, a.Registry())
	for store, want := range map[string]float64{"primary": 0, "copy1": 1} {
		if got := must(t, mfs, "lifeboat_scrub_damaged_objects", "store", store); got != want {
			t.Errorf("lifeboat_scrub_damaged_objects{store=%q} = %v, want %v", store, got, want)
		}
		if got := must(t, mfs, "lifeboat_scrub_last_success_timestamp_seconds", "store", store); got != float64(now.Unix()) {
			t.Errorf("lifeboat_scrub_last_success_timestamp_seconds{store=%q} = %v, want %v", store, got, now.Unix())
		}
		if got := must(t, mfs, "lifeboat_scrub_bytes_read_total", "store", store); got <= 0 {
			t.Errorf("lifeboat_scrub_bytes_read_total{store=%q} = %v", store, got)
		}
		// Each backup is a manifest and a data object (agent --once
		// copies after its jobs: the copy held one backup then).
		if got, want := must(t, mfs, "lifeboat_scrub_objects_checked_total", "store", store), map[string]float64{"primary": 6, "copy1": 2}[store]; got != want {
			t.Errorf("lifeboat_scrub_objects_checked_total{store=%q} = %v, want %v", store, got, want)
		}
	}
	if got := must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobScrub, "result", ResultFailure); got != 1 {
		t.Errorf("failed scrub runs = %v, want 1", got)
	}

	clock.Advance(time.Hour)
	b, err := New(config(), lg)
	if err != nil {
		t.Fatal(err)
	}
	b.refresh(t.Context())
	mfs = gather(t, b.Registry())
	if got := must(t, mfs, "lifeboat_scrub_last_success_timestamp_seconds", "store", "copy1"); got != float64(now.Unix()) {
		t.Errorf("a new agent's lifeboat_scrub_last_success_timestamp_seconds{store=copy1} = %v, want %v from the store", got, now.Unix())
	}
	if got := must(t, mfs, "lifeboat_scrub_damaged_objects", "store", "copy1"); got != 1 {
		t.Errorf("a new agent's lifeboat_scrub_damaged_objects{store=copy1} = %v, want 1 from the store", got)
	}
}
