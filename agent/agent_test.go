package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/go-cmp/cmp"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestAgentEndToEnd runs an agent with @every 1s schedules against real
// etcd and a directory store: it takes backups, prunes them to two (plus
// the newest proven one), drills them with drill.Run, and its scraped
// /metrics, /status and health endpoints move as they should. No
// goroutine outlives Run.
func TestAgentEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and drills")
	}
	f := newFixture(t, nil, 400)
	lg, logs := testLogger(t)
	cfg := f.config(t, lg)
	// One backup before the start, so that the first drill has one.
	if _, err := backup.Run(t.Context(), *cfg.Snapshot, lg); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	leaks := goleak.IgnoreCurrent()

	a := start(t, cfg, lg)
	if got := httpCode(t, a.url+"/healthz"); got != http.StatusOK {
		t.Errorf("/healthz = %d", got)
	}
	mfs, _ := scrape(t, a.url)
	for _, job := range []string{JobSnapshot, JobPrune, JobDrill} {
		for _, r := range []string{ResultSuccess, ResultFailure, ResultSkipped} {
			if _, ok := value(mfs, "lifeboat_job_runs_total", JobLabel, job, "result", r); !ok {
				t.Errorf("lifeboat_job_runs_total{job_name=%q,result=%q} not pre-initialised", job, r)
			}
		}
	}
	if _, ok := value(mfs, "lifeboat_drill_last_result"); ok {
		t.Error("lifeboat_drill_last_result exported before any drill")
	}

	var last map[string]float64
	waitFor(t, "3 snapshots, a prune that deleted, 2 passed drills", 3*time.Minute, func() bool {
		mfs, _ = scrape(t, a.url)
		last = map[string]float64{
			"snap": must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess),
			"del":  must(t, mfs, "lifeboat_retention_deleted_total"),
			"dril": must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobDrill, "result", ResultSuccess),
		}
		return last["snap"] >= 3 && last["del"] >= 1 && last["dril"] >= 2
	})
	for name, labels := range map[string][]string{
		"lifeboat_job_runs_total":      {JobLabel, JobSnapshot, "result", ResultFailure},
		"lifeboat_job_runs_total ":     {JobLabel, JobDrill, "result", ResultFailure},
		"lifeboat_job_runs_total  ":    {JobLabel, JobPrune, "result", ResultFailure},
		"lifeboat_notifications_total": {"result", "sent"},
	} {
		if v := must(t, mfs, strings.TrimSpace(name), labels...); v != 0 {
			t.Errorf("%s%v = %v, want 0", name, labels, v)
		}
	}
	now := float64(time.Now().Unix())
	for _, c := range []struct {
		name   string
		labels []string
		lo, hi float64
	}{
		{"lifeboat_job_last_success_timestamp_seconds", []string{JobLabel, JobSnapshot}, now - 300, now + 1},
		{"lifeboat_job_last_success_timestamp_seconds", []string{JobLabel, JobPrune}, now - 300, now + 1},
		{"lifeboat_job_last_success_timestamp_seconds", []string{JobLabel, JobDrill}, now - 300, now + 1},
		{"lifeboat_backup_newest_timestamp_seconds", nil, now - 300, now + 1},
		{"lifeboat_backup_newest_proven_timestamp_seconds", nil, now - 300, now + 1},
		{"lifeboat_drill_last_timestamp_seconds", nil, now - 300, now + 1},
		{"lifeboat_drill_last_result", nil, 1, 1},
		{"lifeboat_drill_recovery_seconds", nil, 0.001, 600},
		{"lifeboat_drill_phase_duration_seconds", []string{"phase", "boot"}, 0.001, 600},
		{"lifeboat_drill_phase_duration_seconds", []string{"phase", "fetch"}, 0, 600},
		{"lifeboat_snapshot_revision", nil, 2, 1e9},
		{"lifeboat_snapshot_size_bytes", []string{"kind", "raw"}, 100 << 10, 1 << 30},
		{"lifeboat_snapshot_size_bytes", []string{"kind", "stored"}, 1, 1 << 30},
		{"lifeboat_upload_bytes_total", nil, 1, 1e12},
		{"lifeboat_backups", []string{"state", "ok"}, 2, 4},
		{"lifeboat_backups", []string{"state", "broken"}, 0, 0},
		{"lifeboat_backups", []string{"state", "locked"}, 0, 0},
		{"lifeboat_leader", nil, 1, 1},
		{"lifeboat_store_up", nil, 1, 1},
		{"lifeboat_job_duration_seconds", []string{JobLabel, JobSnapshot}, 3, 1e6},
		{"lifeboat_build_info", []string{"version", "test"}, 1, 1},
	} {
		v := must(t, mfs, c.name, c.labels...)
		if v < c.lo || v > c.hi {
			t.Errorf("%s%v = %v, want within [%v, %v]", c.name, c.labels, v, c.lo, c.hi)
		}
	}
	raw := must(t, mfs, "lifeboat_snapshot_size_bytes", "kind", "raw")
	if stored := must(t, mfs, "lifeboat_snapshot_size_bytes", "kind", "stored"); stored >= raw {
		t.Errorf("stored size %v not below raw size %v (zstd)", stored, raw)
	}
	for _, fam := range []string{"go_goroutines", "process_resident_memory_bytes"} {
		if mfs[fam] != nil {
			t.Errorf("%s exported: the Go and process collectors are the caller's to register", fam)
		}
	}

	if got := httpCode(t, a.url+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz = %d", got)
	}
	st := getStatus(t, a.url)
	if st.NewestBackup == nil || st.NewestProvenBackup == nil {
		t.Fatalf("/status newest %+v, newest proven %+v", st.NewestBackup, st.NewestProvenBackup)
	}
	if !st.Leader.IsLeader || st.Leader.Holder != cfg.Identity {
		t.Errorf("/status leader = %+v", st.Leader)
	}
	for _, j := range []string{JobSnapshot, JobPrune, JobDrill} {
		js := st.Jobs[j]
		if js == nil || js.LastRun == nil || js.LastSuccess == nil || js.NextRun == nil || js.Schedule != "@every 1s" {
			t.Errorf("/status job %s = %+v", j, js)
		}
	}

	err, took := a.stop(t)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	t.Logf("Run returned %v after cancellation", took)
	if e := dirEntries(t, f.spool); len(e) != 0 {
		t.Errorf("spool not empty: %v", e)
	}
	if e := dirEntries(t, f.scratch); len(e) != 0 {
		t.Errorf("scratch not empty: %v", e)
	}
	if !strings.Contains(logs.String(), "agent stopped") {
		t.Error("no 'agent stopped' log line")
	}
	goleak.VerifyNone(t, leaks)
}

// TestMetricsLint checks a scrape of an agent with every job configured,
// the Go and process collectors included, with promtool.
func TestMetricsLint(t *testing.T) {
	lg, _ := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	reg := NewRegistry()
	a := start(t, Config{
		Backups:   b,
		Snapshot:  &backup.Job{Backups: b},
		Prune:     &prune.Job{Backups: b},
		Drill:     func(context.Context) (*drill.Outcome, error) { return nil, errors.New("unused") },
		Schedules: Schedules{Snapshot: "@daily", Prune: "@daily", Drill: "@daily"},
		Listen:    "127.0.0.1:0", Registry: reg, Version: "test",
	}, lg)
	mfs, body := scrape(t, a.url)
	if mfs["go_goroutines"] == nil || mfs["process_resident_memory_bytes"] == nil {
		t.Error("NewRegistry lacks the Go or process collector")
	}
	promtoolCheck(t, body)
}

// TestScheduleSkipsOverlap drives the clock by hand: a run that is still
// going when its next time comes makes that run skipped (counted), and
// jitter delays a run.
func TestScheduleSkipsOverlap(t *testing.T) {
	lg, logs := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	t0 := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := newFakeClock(t0)
	started := make(chan struct{}, 10)
	release := make(chan struct{})
	var calls atomic.Int32
	a := start(t, Config{
		Backups: b,
		Drill: func(ctx context.Context) (*drill.Outcome, error) {
			calls.Add(1)
			started <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return &drill.Outcome{BackupID: "20261130T120000Z-r1", Passed: true, Phases: map[string]time.Duration{"boot": time.Second}}, nil
		},
		Schedules: Schedules{Drill: "@every 1m"},
		Jitter:    10 * time.Second,
		Listen:    "127.0.0.1:0",
		Clock:     clock,
	}, lg)

	waitFor(t, "the first run to be scheduled", 10*time.Second, func() bool { return clock.hasWaiter(t0.Add(time.Minute)) })
	if status := getStatus(t, a.url); status.Jobs[JobDrill].NextRun == nil || !status.Jobs[JobDrill].NextRun.Equal(t0.Add(time.Minute)) {
		t.Errorf("/status next run = %v, want %v", status.Jobs[JobDrill].NextRun, t0.Add(time.Minute))
	}
	clock.Advance(time.Minute)
	// The jitter holds the run back for up to 10s.
	waitFor(t, "the second run to be scheduled", 10*time.Second, func() bool { return clock.hasWaiter(t0.Add(2 * time.Minute)) })
	if calls.Load() != 0 {
		t.Fatal("the run started before its jitter passed")
	}
	clock.Advance(10 * time.Second)
	<-started
	clock.Advance(50 * time.Second) // t0+2m: the first run is still going
	waitFor(t, "a skipped run", 10*time.Second, func() bool {
		mfs, _ := scrape(t, a.url)
		return must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobDrill, "result", ResultSkipped) == 1
	})
	if !strings.Contains(logs.String(), "run skipped") {
		t.Error("the skipped run was not logged")
	}
	if status := getStatus(t, a.url); !status.Jobs[JobDrill].Running {
		t.Error("/status does not show the drill running")
	}
	close(release)
	waitFor(t, "the run to succeed", 10*time.Second, func() bool {
		mfs, _ := scrape(t, a.url)
		return must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobDrill, "result", ResultSuccess) == 1
	})
	mfs, _ := scrape(t, a.url)
	if got := must(t, mfs, "lifeboat_drill_last_result"); got != 1 {
		t.Errorf("lifeboat_drill_last_result = %v", got)
	}
	if got := must(t, mfs, "lifeboat_drill_phase_duration_seconds", "phase", "boot"); got != 1 {
		t.Errorf("boot phase = %v, want 1", got)
	}
	if got := must(t, mfs, "lifeboat_job_last_success_timestamp_seconds", JobLabel, JobDrill); got != float64(t0.Add(2*time.Minute).Unix()) {
		t.Errorf("last success = %v, want the fake clock's %v", got, t0.Add(2*time.Minute).Unix())
	}
	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	if calls.Load() != 1 {
		t.Errorf("drill ran %d times, want 1", calls.Load())
	}
}

// TestTwoAgentsOneLeader runs two agents with the lock against one
// cluster: only the holder takes backups (one per tick, so the sum of
// their successful runs is the number of manifests), the other shows the
// holder, and when the holder stops the other takes over at once.
func TestTwoAgentsOneLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 200)
	lg1, _ := testLogger(t)
	lg2, _ := testLogger(t)
	agents := make([]*running, 2)
	for i, lg := range []*slog.Logger{lg1, lg2} {
		cfg := f.config(t, lg)
		cfg.Prune, cfg.Drill = nil, nil
		cfg.Schedules = Schedules{Snapshot: "@every 1s"}
		cfg.Identity = fmt.Sprintf("agent-%d", i+1)
		cc, err := f.etcdConfig().ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.Lock = &LockConfig{Etcd: cc, TTL: 5 * time.Second, Identity: cfg.Identity}
		agents[i] = start(t, cfg, lg)
	}
	// From the registry, which outlives Run (the HTTP server does not).
	successes := func(a *running) float64 {
		return must(t, gather(t, a.reg), "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess)
	}
	leaderOf := func() (lead, other *running) {
		for i, a := range agents {
			mfs, _ := scrape(t, a.url)
			if must(t, mfs, "lifeboat_leader") == 1 {
				return a, agents[1-i]
			}
		}
		return nil, nil
	}
	waitFor(t, "4 backups", 2*time.Minute, func() bool { return successes(agents[0])+successes(agents[1]) >= 4 })
	lead, other := leaderOf()
	if lead == nil {
		t.Fatal("no agent reports lifeboat_leader 1")
	}
	if mfs, _ := scrape(t, other.url); must(t, mfs, "lifeboat_leader") != 0 {
		t.Error("both agents report lifeboat_leader 1")
	}
	if n := successes(other); n != 0 {
		t.Errorf("the standby took %v backups", n)
	}
	if st := getStatus(t, other.url); st.Leader.IsLeader || st.Leader.Holder != lead.cfg.Identity || st.Leader.Lock != LockPrefix+testCluster {
		t.Errorf("standby /status leader = %+v, want holder %s", st.Leader, lead.cfg.Identity)
	}

	if err, _ := lead.stop(t); err != nil {
		t.Errorf("leader Run: %v", err)
	}
	before := successes(other)
	// The stopped leader resigned: the standby takes over well within TTL.
	waitFor(t, "the standby to take over and back up", 30*time.Second, func() bool { return successes(other) > before })
	if err, _ := other.stop(t); err != nil {
		t.Errorf("standby Run: %v", err)
	}

	ids := manifests(t, f.backups)
	runs := successes(agents[0]) + successes(agents[1])
	if float64(len(ids)) != runs {
		t.Errorf("%d manifests, but the agents report %v successful snapshots: a tick made two backups or a run was lost", len(ids), runs)
	}
	seconds := map[string]bool{}
	for _, id := range ids {
		sec, _, _ := strings.Cut(id, "-")
		if seconds[sec] {
			t.Errorf("two backups started in second %s", sec)
		}
		seconds[sec] = true
	}
	// The lock is gone from etcd.
	resp, err := f.etcd.Client(t).Get(t.Context(), LockPrefix+testCluster+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("lock keys left in etcd: %d", len(resp.Kvs))
	}
}

// TestLockExpiresWhenHolderDies: a holder that dies without releasing the
// lock (its lease no longer kept alive) loses it after the TTL, and the
// waiting agent takes over; until then it shows the dead holder.
func TestLockExpiresWhenHolderDies(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd, waits a lease TTL")
	}
	f := newFixture(t, nil, 100)
	cc, err := f.etcdConfig().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	// The "dead" agent: campaigns, then stops keeping its lease alive.
	cli, err := clientv3.New(cc)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := cli.Grant(t.Context(), 5)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID))
	if err != nil {
		t.Fatal(err)
	}
	if err := concurrency.NewElection(sess, LockPrefix+testCluster).Campaign(t.Context(), "dead-agent"); err != nil {
		t.Fatal(err)
	}
	sess.Orphan()
	cli.Close()
	died := time.Now()

	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 1s"}
	cfg.Lock = &LockConfig{Etcd: cc, TTL: 5 * time.Second, Identity: "survivor"}
	a := start(t, cfg, lg)
	if st := getStatus(t, a.url); st.Leader.IsLeader || st.Leader.Holder != "dead-agent" {
		t.Errorf("/status leader before expiry = %+v, want holder dead-agent", st.Leader)
	}
	waitFor(t, "the survivor to take over and back up", time.Minute, func() bool {
		return must(t, gather(t, a.reg), "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess) >= 1
	})
	t.Logf("took over %v after the holder died (TTL 5s)", time.Since(died).Round(100*time.Millisecond))
	if st := getStatus(t, a.url); !st.Leader.IsLeader || st.Leader.Holder != "survivor" {
		t.Errorf("/status leader after expiry = %+v", st.Leader)
	}
}

// TestShutdownDuringUpload cancels the agent while a multipart upload to
// S3 is in flight: Run returns nil promptly, no manifest is written, the
// multipart upload is aborted and the spool is empty.
func TestShutdownDuringUpload(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and versitygw")
	}
	srv := s3test.Start(t)
	s3test.Env(t, srv.AccessKey, srv.SecretKey)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	bucket := fmt.Sprintf("agent-test-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, false)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: bucket, Prefix: "team", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
		PartSize: uploader.MinS3PartSize, Concurrency: 1, MaxAttempts: 2,
	}, nil)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	// About 12 MiB of etcd data, stored uncompressed: a multipart upload.
	f := newFixture(t, st, 4000)
	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 1h"}
	cfg.RunAtStart = true
	cfg.Snapshot.Encoding = repository.Encoding{Compression: "none"}
	cfg.ShutdownTimeout = 20 * time.Second
	// Every part hangs: the upload is in flight until cancelled.
	proxy.SetFault(func(r *http.Request, n int) s3test.Fault {
		if s3test.Op(r) == "UploadPart" {
			return s3test.Stall(10 * time.Minute)
		}
		return s3test.None
	})
	a := start(t, cfg, lg)
	waitFor(t, "a part upload in flight", time.Minute, func() bool { return proxy.Count("UploadPart") > 0 })
	if got := httpCode(t, a.url+"/readyz"); got != http.StatusOK {
		t.Errorf("/readyz = %d with S3 reachable", got)
	}
	proxy.SetFault(func(r *http.Request, n int) s3test.Fault {
		switch s3test.Op(r) {
		case "UploadPart":
			return s3test.Stall(10 * time.Minute)
		case "HeadObject":
			return s3test.Status(http.StatusInternalServerError)
		}
		return s3test.None
	})
	if got := httpCode(t, a.url+"/readyz"); got != http.StatusServiceUnavailable {
		t.Errorf("/readyz = %d with S3 failing, want 503", got)
	}
	if mfs, _ := scrape(t, a.url); must(t, mfs, "lifeboat_store_up") != 0 {
		t.Error("lifeboat_store_up is not 0 after a failed readiness check")
	}
	// The check below can see a multipart upload left behind.
	out, err := srv.Client(t).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil || len(out.Uploads) != 1 {
		t.Fatalf("before the shutdown: %v, %d multipart uploads, want 1", err, len(out.Uploads))
	}
	err, took := a.stop(t)
	if err != nil {
		t.Errorf("Run: %v", err)
	}
	if took > cfg.ShutdownTimeout {
		t.Errorf("Run took %v to return, more than ShutdownTimeout %v", took, cfg.ShutdownTimeout)
	}
	t.Logf("Run returned %v after cancellation", took)
	proxy.SetFault(nil)
	if ids := manifests(t, f.backups); len(ids) != 0 {
		t.Errorf("manifests after a cancelled backup: %v", ids)
	}
	out, err = srv.Client(t).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	for _, u := range out.Uploads {
		t.Errorf("multipart upload left behind: %s", aws.ToString(u.Key))
	}
	if e := dirEntries(t, f.spool); len(e) != 0 {
		t.Errorf("spool not empty: %v", e)
	}
}

// webhook is a real HTTP server that records the JSON it receives.
type webhook struct {
	srv  *httptest.Server
	mu   sync.Mutex
	got  []Notification
	fail atomic.Int32 // answer 503 to this many more requests
}

func newWebhook(t *testing.T) *webhook {
	w := &webhook{}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if w.fail.Add(-1) >= 0 {
			http.Error(rw, "busy", http.StatusServiceUnavailable)
			return
		}
		var n Notification
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil || r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
			http.Error(rw, "bad request", http.StatusBadRequest)
			return
		}
		w.mu.Lock()
		w.got = append(w.got, n)
		w.mu.Unlock()
	}))
	t.Cleanup(w.srv.Close)
	return w
}

func (w *webhook) received() []Notification {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Notification(nil), w.got...)
}

// TestCorruptBackupFailsDrill damages a stored object: the next drill
// fails, lifeboat_drill_last_result drops to 0, the backup stops being
// the newest proven one, and the webhook receives a drill_failed payload
// (its secret URL never logged).
func TestCorruptBackupFailsDrill(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and drills")
	}
	storeDir := t.TempDir()
	st, err := uploader.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, st, 300)
	lg, logs := testLogger(t)
	m, err := backup.Run(t.Context(), backup.Job{Etcd: f.etcdConfig(), SpoolDir: f.spool, Backups: f.backups,
		Encoding: repository.Encoding{Compression: "zstd"}, Version: "test"}, lg)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	hook := newWebhook(t)
	hook.fail.Store(1) // the first attempt fails: retried
	secretURL := hook.srv.URL + "/hooks/T0KEN-s3cr3t"
	cfg := f.config(t, lg)
	cfg.Snapshot, cfg.Prune = nil, nil
	cfg.Schedules = Schedules{Drill: "@every 1s"}
	cfg.Notify = NotifyConfig{Webhooks: []snapshot.Secret{snapshot.Secret(secretURL)}, On: []string{EventDrillFailed}, Backoff: 50 * time.Millisecond}
	a := start(t, cfg, lg)

	// The metric is set when the drill ends; the status's proven backup at
	// the listing refresh after the job: wait for both (the CI of dd78ff6
	// read the status between the two).
	waitFor(t, "a passed drill, the backup proven in /status", 2*time.Minute, func() bool {
		mfs, _ := scrape(t, a.url)
		v, ok := value(mfs, "lifeboat_drill_last_result")
		st := getStatus(t, a.url)
		return ok && v == 1 && st.NewestProvenBackup != nil && st.NewestProvenBackup.ID == m.ID
	})

	// Flip bytes in the middle of the stored object; its size stays.
	obj := filepath.Join(storeDir, filepath.FromSlash(m.Object))
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(data) / 2; i < len(data)/2+64 && i < len(data); i++ {
		data[i] ^= 0xff
	}
	if err := os.WriteFile(obj, data, 0o600); err != nil {
		t.Fatal(err)
	}

	waitFor(t, "a failed drill and its webhook", 2*time.Minute, func() bool {
		mfs, _ := scrape(t, a.url)
		v, _ := value(mfs, "lifeboat_drill_last_result")
		return v == 0 && len(hook.received()) > 0
	})
	mfs, _ := scrape(t, a.url)
	if v := must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobDrill, "result", ResultFailure); v < 1 {
		t.Errorf("drill failures = %v", v)
	}
	if v := must(t, mfs, "lifeboat_backup_newest_proven_timestamp_seconds"); v != 0 {
		t.Errorf("newest proven timestamp = %v after the only backup failed its drill, want 0", v)
	}
	n := hook.received()[0]
	if n.Event != EventDrillFailed || n.Cluster != testCluster || n.BackupID != m.ID || n.Error == "" || n.Time.IsZero() {
		t.Errorf("payload = %+v", n)
	}
	if !strings.Contains(n.Text, m.ID) || !strings.Contains(n.Text, "FAILED") {
		t.Errorf("text = %q", n.Text)
	}
	if len(n.Alerts) != 1 || n.Alerts[0].Labels["alertname"] != "LifeboatDrillFailed" || n.Status != "firing" || n.Version != "4" {
		t.Errorf("Alertmanager form = %+v", n)
	}
	if !strings.Contains(n.Error, "sha256") {
		t.Errorf("error %q does not name the sha256 mismatch", n.Error)
	}
	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	if leak := containsAny(logs.String(), "T0KEN-s3cr3t", hook.srv.URL); leak != "" {
		t.Errorf("the webhook URL (%q) appears in the log", leak)
	}
	if e := dirEntries(t, f.scratch); len(e) != 0 {
		t.Errorf("scratch not empty: %v", e)
	}
}

// TestNotifier covers retries, permanent errors, the payload, and that a
// slow webhook never blocks: a full queue drops.
func TestNotifier(t *testing.T) {
	lg, logs := testLogger(t)
	reg := NewRegistry()
	m, err := newMetrics(reg, nil, "test")
	if err != nil {
		t.Fatal(err)
	}
	ok := newWebhook(t)
	ok.fail.Store(2)
	gone := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(gone.Close)
	n := newNotifier(NotifyConfig{
		Webhooks: []snapshot.Secret{snapshot.Secret(ok.srv.URL + "/a?token=sekrit"), snapshot.Secret(gone.URL + "/b?token=sekrit2")},
		On:       []string{EventSnapshotFailed, EventStale}, Backoff: 10 * time.Millisecond, Attempts: 4,
	}, testCluster, "agent-1", RealClock{}, m, lg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); n.run(ctx) }()
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	n.notify(event{kind: EventSnapshotFailed, err: "etcd unreachable", at: at})
	n.notify(event{kind: EventDrillFailed, err: "not configured: not sent", at: at})
	n.close()
	<-done

	got := ok.received()
	want := []string{EventSnapshotFailed}
	var kinds []string
	for _, g := range got {
		kinds = append(kinds, g.Event)
	}
	if diff := cmp.Diff(want, kinds); diff != "" {
		t.Errorf("events received (-want +got):\n%s", diff)
	}
	if len(got) == 1 {
		if got[0].Text != "lifeboat: backup of cluster prod FAILED: etcd unreachable" || !got[0].Time.Equal(at) || got[0].Agent != "agent-1" {
			t.Errorf("payload = %+v", got[0])
		}
	}
	mfs := gather(t, reg)
	if v := must(t, mfs, "lifeboat_notifications_total", "result", "sent"); v != 1 {
		t.Errorf("sent = %v", v)
	}
	if v := must(t, mfs, "lifeboat_notifications_total", "result", "failed"); v != 1 {
		t.Errorf("failed = %v (the 404 webhook)", v)
	}
	if leak := containsAny(logs.String(), "sekrit", ok.srv.URL, gone.URL); leak != "" {
		t.Errorf("a webhook URL (%q) appears in the log:\n%s", leak, logs.String())
	}

	t.Run("slow webhook never blocks", func(t *testing.T) {
		release := make(chan struct{})
		slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
		t.Cleanup(slow.Close)
		n := newNotifier(NotifyConfig{Webhooks: []snapshot.Secret{snapshot.Secret(slow.URL)}, On: []string{EventStale}, QueueSize: 1, Attempts: 1, Timeout: time.Minute},
			testCluster, "a", RealClock{}, m, lg)
		done := make(chan struct{})
		go func() { defer close(done); n.run(context.Background()) }()
		begin := time.Now()
		for range 5 {
			n.notify(event{kind: EventStale, err: "old", at: at})
		}
		if d := time.Since(begin); d > time.Second {
			t.Errorf("notify blocked for %v", d)
		}
		close(release)
		n.close()
		<-done
		if v := must(t, gather(t, reg), "lifeboat_notifications_total", "result", "dropped"); v < 3 {
			t.Errorf("dropped = %v, want at least 3 of 5 with a queue of 1", v)
		}
	})
}

// TestSystemdNotify checks READY=1, WATCHDOG=1 and STOPPING=1 on a real
// unix datagram socket.
func TestSystemdNotify(t *testing.T) {
	lg, _ := testLogger(t)
	sock := filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	msgs := make(chan string, 100)
	go func() {
		buf := make([]byte, 256)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	st, _ := uploader.NewDir(t.TempDir())
	a := start(t, Config{Backups: &repository.Repo{Store: st, Cluster: testCluster}, Systemd: Systemd{Socket: sock, Watchdog: 100 * time.Millisecond}}, lg)
	next := func() string {
		select {
		case m := <-msgs:
			return m
		case <-time.After(30 * time.Second):
			t.Fatal("no sd_notify message")
			return ""
		}
	}
	if m := next(); m != "READY=1" {
		t.Errorf("first message %q, want READY=1", m)
	}
	if m := next(); m != "WATCHDOG=1" {
		t.Errorf("second message %q, want WATCHDOG=1", m)
	}
	if err, _ := a.stop(t); err != nil {
		t.Fatal(err)
	}
	for {
		m := next()
		if m == "STOPPING=1" {
			break
		}
		if m != "WATCHDOG=1" {
			t.Fatalf("unexpected message %q", m)
		}
	}
}

// TestTextfileAndPush writes the metrics for node_exporter and pushes
// them to a Pushgateway-like HTTP server.
func TestTextfileAndPush(t *testing.T) {
	reg := NewRegistry()
	if _, err := newMetrics(reg, []string{JobSnapshot}, "test"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "lifeboat.prom")
	for range 2 {
		if err := WriteTextfile(path, reg); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("textfile: %v, mode %v", err, fi.Mode())
	}
	if e := dirEntries(t, dir); len(e) != 1 {
		t.Errorf("directory holds %v, want only the textfile", e)
	}
	body, _ := os.ReadFile(path)
	if !strings.Contains(string(body), `lifeboat_job_runs_total{job_name="snapshot",result="skipped"} 0`) {
		t.Errorf("textfile lacks the runs series:\n%s", body)
	}
	promtoolCheck(t, body)

	var mu sync.Mutex
	var gotPath, gotMethod, gotAuth string
	var gotLen int
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		gotPath, gotMethod, gotLen = r.URL.Path, r.Method, len(b)
		u, p, _ := r.BasicAuth()
		gotAuth = u + ":" + p
		mu.Unlock()
		if strings.Contains(r.URL.Path, "fail") {
			http.Error(w, "nope", http.StatusInternalServerError)
		}
	}))
	t.Cleanup(gw.Close)
	withCreds := strings.Replace(gw.URL, "http://", "http://pusher:pa55word@", 1)
	if err := Push(t.Context(), withCreds, testCluster, "snapshot-drill", reg, nil); err != nil {
		t.Fatalf("Push: %v", err)
	}
	mu.Lock()
	if gotMethod != http.MethodPut || !strings.Contains(gotPath, "/cluster/prod") || !strings.Contains(gotPath, "/instance/snapshot-drill") || !strings.HasPrefix(gotPath, "/metrics/job/lifeboat/") || gotLen == 0 || gotAuth != "pusher:pa55word" {
		t.Errorf("push: %s %s, %d bytes, auth %q", gotMethod, gotPath, gotLen, gotAuth)
	}
	mu.Unlock()
	err := Push(t.Context(), withCreds+"/fail", testCluster, "snapshot-drill", reg, nil)
	if err == nil {
		t.Fatal("Push to a failing gateway succeeded")
	}
	if strings.Contains(err.Error(), "pa55word") {
		t.Errorf("Push error shows the password: %v", err)
	}
}

// TestStaleNotification: with no fresh backup the stale event is sent
// once (by the leader), not on every refresh.
func TestStaleNotification(t *testing.T) {
	lg, _ := testLogger(t)
	st, _ := uploader.NewDir(t.TempDir())
	b := &repository.Repo{Store: st, Cluster: testCluster}
	old := jobtest.PutBackup(t, b, time.Now().Add(-5*time.Hour), uploader.PutOptions{}, false)
	hook := newWebhook(t)
	clock := newFakeClock(time.Now().Truncate(time.Second))
	a := start(t, Config{
		Backups: b, StaleAfter: 3 * time.Hour, RefreshInterval: time.Minute, Clock: clock,
		Notify: NotifyConfig{Webhooks: []snapshot.Secret{snapshot.Secret(hook.srv.URL)}, On: []string{EventStale}},
	}, lg)
	waitFor(t, "the stale webhook", 30*time.Second, func() bool { return len(hook.received()) == 1 })
	for i := range 3 {
		waitFor(t, "the refresh timer", 10*time.Second, func() bool { return clock.hasWaiter(clock.Now().Add(time.Minute)) })
		clock.Advance(time.Minute)
		_ = i
	}
	waitFor(t, "the refresh timer", 10*time.Second, func() bool { return clock.hasWaiter(clock.Now().Add(time.Minute)) })
	if err, _ := a.stop(t); err != nil {
		t.Fatal(err)
	}
	got := hook.received()
	if len(got) != 1 || got[0].Event != EventStale || got[0].BackupID != old.ID || !strings.Contains(got[0].Error, "old") {
		t.Errorf("stale notifications = %+v, want one for %s", got, old.ID)
	}
}

// TestSnapshotRetried: a failing snapshot is tried 1+SnapshotRetries times
// with backoff and then counts as one failed run with one notification.
func TestSnapshotRetried(t *testing.T) {
	lg, logs := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	hook := newWebhook(t)
	a, err := New(Config{
		Backups: b,
		Snapshot: &backup.Job{Etcd: snapshot.Config{Endpoints: []string{"http://127.0.0.1:1"}, DialTimeout: time.Second},
			SpoolDir: t.TempDir(), Backups: b, Encoding: repository.Encoding{Compression: "zstd"}},
		Schedules:       Schedules{Snapshot: "@hourly"},
		SnapshotRetries: 2, RetryBackoff: 20 * time.Millisecond,
		Notify: NotifyConfig{Webhooks: []snapshot.Secret{snapshot.Secret(hook.srv.URL)}, On: []string{EventSnapshotFailed}},
	}, lg)
	if err != nil {
		t.Fatal(err)
	}
	err = a.RunOnce(t.Context())
	if err == nil || !strings.Contains(err.Error(), "after 3 attempts") {
		t.Fatalf("RunOnce = %v, want a failure after 3 attempts", err)
	}
	if n := strings.Count(logs.String(), "snapshot failed; retrying"); n != 2 {
		t.Errorf("%d retries logged, want 2", n)
	}
	mfs := gather(t, a.Registry())
	if v := must(t, mfs, "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultFailure); v != 1 {
		t.Errorf("failed runs = %v, want 1", v)
	}
	if got := hook.received(); len(got) != 1 || got[0].Event != EventSnapshotFailed {
		t.Errorf("notifications = %+v, want one snapshot_failed", got)
	}
}
