package agent

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/corrupt"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestDrillRunErrorIsNoVerdict: a drill that cannot run to a verdict (the
// store fails the download; the identity is missing) is an error of the
// run: the job fails, lifeboat_drill_errors_total and the last error time
// go up, but no report is stored, the last verdict (a pass) stays, the
// backup stays the newest proven one, and no drill_failed webhook is sent.
func TestDrillRunErrorIsNoVerdict(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd, versitygw and drills")
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		// setup returns the store the agent uses, the one to read the
		// drill reports from afterwards, and the fault to turn on.
		setup func(t *testing.T) (agentStore, direct uploader.Store, fault func(drillJob *atomic.Bool))
		enc   repository.Encoding
	}{
		{
			name: "the store fails the download",
			enc:  repository.Encoding{Compression: "zstd"},
			setup: func(t *testing.T) (uploader.Store, uploader.Store, func(*atomic.Bool)) {
				srv := s3test.Start(t)
				s3test.Env(t, srv.AccessKey, srv.SecretKey)
				proxy := s3test.NewProxy(t, srv.Endpoint)
				bucket := fmt.Sprintf("agent-test-%d", bucketSeq.Add(1))
				srv.CreateBucket(t, bucket, false)
				mk := func(endpoint string) uploader.Store {
					st, err := uploader.NewS3(t.Context(), uploader.S3Config{
						Bucket: bucket, Prefix: "team", Endpoint: endpoint, Region: srv.Region, PathStyle: true,
						PartSize: uploader.MinS3PartSize, Concurrency: 1, MaxAttempts: 2, MaxBackoff: 50 * time.Millisecond,
					}, nil)
					if err != nil {
						t.Fatalf("NewS3: %v", err)
					}
					return st
				}
				return mk(proxy.URL), mk(srv.Endpoint), func(*atomic.Bool) {
					proxy.SetFault(func(r *http.Request, n int) s3test.Fault {
						if s3test.Op(r) == "GetObject" && strings.Contains(r.URL.Path, "/snapshots/") && !strings.HasSuffix(r.URL.Path, ".json") {
							return s3test.Status(http.StatusServiceUnavailable)
						}
						return s3test.None
					})
				}
			},
		},
		{
			name: "no identity for an encrypted backup",
			enc:  repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}},
			setup: func(t *testing.T) (uploader.Store, uploader.Store, func(*atomic.Bool)) {
				st, err := uploader.NewDir(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return st, st, func(noIdentity *atomic.Bool) { noIdentity.Store(true) }
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, direct, fault := tt.setup(t)
			f := newFixture(t, st, 200)
			lg, logs := testLogger(t)
			m, err := backup.Run(t.Context(), backup.Job{Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups, Encoding: tt.enc, Version: "test"}, lg)
			if err != nil {
				t.Fatalf("Snapshot: %v", err)
			}
			hook := newWebhook(t)
			cfg := f.config(t, lg)
			cfg.Snapshot, cfg.Prune = nil, nil
			cfg.Schedules = Schedules{Drill: "@every 1s"}
			cfg.Notify = NotifyConfig{Webhooks: []snapshot.Secret{snapshot.Secret(hook.srv.URL)}, On: []string{EventDrillFailed}, Backoff: 50 * time.Millisecond}
			var noIdentity atomic.Bool
			dj := drill.Job{Backups: f.backups, Target: "latest"}
			dj.Options.ScratchDir, dj.Options.Timeout, dj.Options.Version = f.scratch, 2*time.Minute, "test"
			cfg.Drill = func(ctx context.Context) (*drill.Outcome, error) {
				j := dj
				if !noIdentity.Load() {
					j.Options.Identities = []age.Identity{id}
				}
				return drill.RunJob(ctx, j, lg)
			}
			a := start(t, cfg, lg)

			waitFor(t, "a passed drill", 2*time.Minute, func() bool {
				mfs, _ := scrape(t, a.url)
				v, ok := value(mfs, "lifeboat_drill_last_result")
				return ok && v == 1
			})
			fault(&noIdentity)
			waitFor(t, "a drill error", 2*time.Minute, func() bool {
				mfs, _ := scrape(t, a.url)
				v, _ := value(mfs, "lifeboat_drill_errors_total")
				return v >= 1
			})
			if err, _ := a.stop(t); err != nil {
				t.Errorf("Run: %v", err)
			}
			mfs := gather(t, a.reg)
			if v := must(t, mfs, "lifeboat_drill_last_result"); v != 1 {
				t.Errorf("lifeboat_drill_last_result = %v after a run error, want the last verdict 1", v)
			}
			if v := must(t, mfs, "lifeboat_drill_last_error_timestamp_seconds"); v <= 0 {
				t.Errorf("lifeboat_drill_last_error_timestamp_seconds = %v", v)
			}
			if v := must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobDrill, "result", ResultFailure); v < 1 {
				t.Errorf("drill job failures = %v, want the run error counted", v)
			}
			if v := must(t, mfs, "lifeboat_backup_newest_proven_timestamp_seconds"); v != unixOrZero(m) {
				t.Errorf("newest proven timestamp = %v, want %v (the backup stays proven)", v, unixOrZero(m))
			}
			for _, n := range hook.received() {
				t.Errorf("webhook sent for a run error: %+v", n)
			}
			// Only the passed drills' reports are in the store.
			b := &repository.Repo{Store: direct, Cluster: testCluster}
			last, err := b.LastDrills(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if r := last[m.ID]; r == nil || !r.Passed {
				t.Errorf("last stored drill of %s = %+v, want the passed one", m.ID, r)
			}
			if !strings.Contains(logs.String(), "drill could not run") {
				t.Errorf("the log does not say the drill could not run:\n%s", logs.String())
			}
		})
	}
}

// TestAgentSurvivesEtcdCrash: a backup whose MVCC content makes etcd
// panic at boot (a tombstone at the revision of a put; verify.File accepts
// it) fails its scheduled drill with a stored report naming the crash,
// and the agent, whose drill's etcd crashed, keeps running and serving.
func TestAgentSurvivesEtcdCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and drills")
	}
	root := t.TempDir()
	st, err := uploader.NewDir(root)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, 200)
	lg, _ := testLogger(t)
	m, err := backup.Run(t.Context(), backup.Job{Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups, Encoding: repository.Encoding{Compression: "none"}, Version: "test"}, lg)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	m = corrupt.Backup(t, f.backups, root, m, corrupt.TombstoneAtPutRevision)
	cfg := f.config(t, lg)
	cfg.Snapshot, cfg.Prune = nil, nil
	cfg.Schedules = Schedules{Drill: "@every 1s"}
	a := start(t, cfg, lg)
	waitFor(t, "a failed drill", 2*time.Minute, func() bool {
		mfs, _ := scrape(t, a.url)
		v, ok := value(mfs, "lifeboat_drill_last_result")
		return ok && v == 0
	})
	// Still alive and serving after the crash of its drill's etcd.
	if code := httpCode(t, a.url+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d after the drill's etcd crashed", code)
	}
	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	last, err := f.backups.LastDrills(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	r := last[m.ID]
	if r == nil || r.Passed {
		t.Fatalf("stored drill of %s = %+v, want a failed verdict", m.ID, r)
	}
	failed := r.FailedChecks()
	if len(failed) == 0 || failed[0].Name != "etcd boot" || !strings.Contains(failed[0].Actual, "unexpected smaller revision") {
		t.Errorf("failed checks %+v, want \"etcd boot\" naming etcd's panic", failed)
	}
}
