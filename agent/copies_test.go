package agent

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestAgentCopies: the agent copies every backup to a copy on a real
// versitygw in the background, drills primary and copy in turn
// (drill.store alternate); when the copy's store fails, snapshots go on,
// the copy's failures and its lag show in the metrics (what
// LifeboatCopyFailing and LifeboatCopyBehind watch), and it catches up
// once the store is back.
func TestAgentCopies(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd, S3 and drills")
	}
	f := newFixture(t, nil, 100)
	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Schedules.Prune = nil, ""
	cfg.Schedules.Drill = "@every 2s"

	srv := s3test.Start(t)
	srv.Env(t)
	srv.CreateBucket(t, "lifeboat-agent-copy", false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: "lifeboat-agent-copy", Prefix: "dr", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
		MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond, ReadTimeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dr := repository.New(st, testCluster)
	dj := drill.Job{Backups: dr, Target: "latest", Options: drill.Options{ScratchDir: f.scratch + "-dr", Timeout: 2 * time.Minute, Version: "test"}}
	cfg.Copies = []Copy{{
		Name:  "dr",
		Job:   replica.Job{Name: "dr", From: f.backups, To: dr},
		Drill: func(ctx context.Context) (*drill.Outcome, error) { return drill.RunJob(ctx, dj, lg) },
	}}
	cfg.CopyInterval = 500 * time.Millisecond
	cfg.DrillStore = DrillStoreAlternate
	a := start(t, cfg, lg)

	metric := func(name string, labels ...string) float64 {
		mfs, _ := scrape(t, a.url)
		v, _ := value(mfs, name, labels...)
		return v
	}
	behind := func() float64 {
		return metric("lifeboat_backup_newest_timestamp_seconds") - metric("lifeboat_copy_recovery_point_timestamp_seconds", "store", "dr", "kind", "backup")
	}
	waitFor(t, "the copy holds backups and passed a drill", 3*time.Minute, func() bool {
		return metric("lifeboat_copy_last_success_timestamp_seconds", "store", "dr") > 0 &&
			metric("lifeboat_copy_recovery_point_timestamp_seconds", "store", "dr", "kind", "backup") > 0 &&
			metric("lifeboat_copy_drill_last_result", "store", "dr") == 1 && metric("lifeboat_drill_last_result") == 1
	})
	if metric("lifeboat_copy_bytes_total", "store", "dr") == 0 {
		t.Error("lifeboat_copy_bytes_total{store=dr} is 0 after copies")
	}
	if st := a.Status(t.Context()).Copies; len(st) != 1 || st[0].Name != "dr" || st[0].LastSuccess == nil || st[0].Backups == 0 || st[0].RecoveryPoint == nil {
		t.Errorf("/status copies %+v", st)
	}

	t.Run("a failing copy lags, the primary goes on", func(t *testing.T) {
		proxy.SetFault(func(*http.Request, int) s3test.Fault { return s3test.Status(http.StatusServiceUnavailable) })
		snaps := metric("lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess)
		failures := metric("lifeboat_copy_failures_total", "store", "dr")
		waitFor(t, "copy failures, snapshots going on, the copy behind", 2*time.Minute, func() bool {
			return metric("lifeboat_copy_failures_total", "store", "dr") > failures &&
				metric("lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess) >= snaps+2 &&
				behind() >= 1
		})
		proxy.SetFault(nil)
		waitFor(t, "the copy caught up", 2*time.Minute, func() bool { return behind() <= 0 })
	})

	// The copy's index (the fleet's cold read of the copy store) lists
	// what the copy holds once a run copied it.
	waitFor(t, "the copy's index lists its newest backup", time.Minute, func() bool {
		var objs []uploader.ObjectInfo
		if err := st.List(t.Context(), testCluster+"/index/", func(o uploader.ObjectInfo) error {
			objs = append(objs, o)
			return nil
		}); err != nil || len(objs) == 0 {
			return false
		}
		idx, err := dr.ReadIndex(t.Context(), dr.NewestIndexKey(objs))
		ids := manifests(t, dr)
		return err == nil && len(ids) > 0 && len(idx.Docs) > 0 && slices.ContainsFunc(idx.Docs, func(d repository.IndexDoc) bool {
			return d.Key == dr.ManifestKey(ids[len(ids)-1])
		})
	})
}
