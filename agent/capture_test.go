package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// fakeCapture is a CaptureFunc that hands each start's hooks to the test
// and runs until its context ends or the test makes it fail.
type fakeCapture struct {
	started chan CaptureHooks
	fail    chan error
	active  atomic.Int32 // runs going now
	most    atomic.Int32 // most runs going at once
	stopped chan stoppedRun
}

// stoppedRun is how one run ended: whether the hooks' Token still said
// "held" once its context had ended.
type stoppedRun struct {
	token int64
	held  bool
	err   error
}

func newFakeCapture() *fakeCapture {
	return &fakeCapture{started: make(chan CaptureHooks, 16), fail: make(chan error), stopped: make(chan stoppedRun, 16)}
}

func (f *fakeCapture) run(ctx context.Context, h CaptureHooks) error {
	n := f.active.Add(1)
	defer f.active.Add(-1)
	for {
		m := f.most.Load()
		if n <= m || f.most.CompareAndSwap(m, n) {
			break
		}
	}
	f.started <- h
	var err error
	select {
	case <-ctx.Done():
		err = ctx.Err()
	case err = <-f.fail:
	}
	tok, held := h.Token()
	f.stopped <- stoppedRun{token: tok, held: held, err: err}
	return err
}

func recv[T any](t *testing.T, what string, ch <-chan T, d time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out after %s waiting for %s", d, what)
		var zero T
		return zero
	}
}

// TestCaptureWithoutLock drives the capture lifecycle of an agent without
// a lock on a fake clock: the job starts at once with the agent's start
// time as its token, its reports move lifeboat_capture_* (scraped as
// text), the lag is computed at scrape and grows when reports stop, a
// gap is counted by reason, a failed job is started again after 1s then
// 2s of backoff and counted, /status shows it, promtool accepts the
// scrape, and the job stops with the agent.
func TestCaptureWithoutLock(t *testing.T) {
	lg, logs := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	clock := newFakeClock(t0)
	fc := newFakeCapture()
	a := start(t, Config{
		Backups:  b,
		Snapshot: &backup.Job{Backups: b}, // never run here
		Capture:  fc.run,
		Listen:   "127.0.0.1:0",
		Clock:    clock,
		Registry: NewRegistry(),
		Version:  "test",
	}, lg)

	h := recv(t, "the capture job to start", fc.started, 10*time.Second)
	if tok, held := h.Token(); tok != t0.UnixNano() || !held {
		t.Errorf("Token() = %d, %v; want the start time %d, true", tok, held, t0.UnixNano())
	}
	mfs, _ := scrape(t, a.url)
	for _, r := range capture.GapReasons {
		if v, ok := value(mfs, "lifeboat_capture_gaps_total", "reason", string(r)); !ok || v != 0 {
			t.Errorf("lifeboat_capture_gaps_total{reason=%q} = %v, %v; want 0, pre-created", r, v, ok)
		}
	}
	if got := must(t, mfs, "lifeboat_capture_enabled"); got != 1 {
		t.Errorf("lifeboat_capture_enabled = %v, want 1", got)
	}
	if got := must(t, mfs, "lifeboat_capture_up"); got != 0 {
		t.Errorf("lifeboat_capture_up before any report = %v, want 0", got)
	}
	// Before the first durable point: the time since capture began.
	clock.Advance(3 * time.Second)
	if got := must(t, gather(t, a.reg), "lifeboat_capture_lag_seconds"); got != 3 {
		t.Errorf("lag before the first report = %v, want 3 (since capture began)", got)
	}

	h.Report(capture.Status{Running: true, Generation: "20261201T100000Z-r90", Revision: 100, RecoveryPoint: t0.Add(3 * time.Second)})
	mfs, body := scrape(t, a.url)
	for name, want := range map[string]float64{
		"lifeboat_capture_up":                               1,
		"lifeboat_capture_revision":                         100,
		"lifeboat_capture_recovery_point_timestamp_seconds": float64(t0.Add(3*time.Second).UnixNano()) / 1e9,
		"lifeboat_capture_lag_seconds":                      0,
		"lifeboat_capture_restarts_total":                   0,
	} {
		if got := must(t, mfs, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	promtoolCheck(t, body)

	// No report for 40s: the lag grows at scrape, nothing else moves.
	clock.Advance(40 * time.Second)
	mfs, _ = scrape(t, a.url)
	if got := must(t, mfs, "lifeboat_capture_lag_seconds"); got != 40 {
		t.Errorf("lag 40s after the last report = %v, want 40", got)
	}
	if got := must(t, mfs, "lifeboat_capture_up"); got != 1 {
		t.Errorf("lifeboat_capture_up = %v, want 1 (a stuck job still says it runs: the lag is what shows it)", got)
	}

	// A gap: counted; its report carries no recovery point yet, so the
	// old one stays (still what a restore can reach).
	h.Report(capture.Status{Running: false, Generation: "20261201T100000Z-r90", Revision: 100, Gap: capture.GapCompacted, Err: errors.New("watch compacted")})
	h.Report(capture.Status{Running: true, Generation: "20261201T100043Z-r180", Revision: 180})
	mfs, _ = scrape(t, a.url)
	if got := must(t, mfs, "lifeboat_capture_gaps_total", "reason", string(capture.GapCompacted)); got != 1 {
		t.Errorf("gaps_total{compacted} = %v, want 1", got)
	}
	if got := must(t, mfs, "lifeboat_capture_lag_seconds"); got != 40 {
		t.Errorf("lag after a gap = %v, want 40 (the older recovery point stays)", got)
	}
	if got := must(t, mfs, "lifeboat_capture_revision"); got != 180 {
		t.Errorf("revision = %v, want 180", got)
	}
	if !strings.Contains(logs.String(), "capture gap") {
		t.Error("the gap was not logged")
	}

	// The job fails: it is started again after 1s, then after 2s.
	for i, backoff := range []time.Duration{time.Second, 2 * time.Second} {
		now := clock.Now()
		fc.fail <- fmt.Errorf("failure %d", i+1)
		recv(t, "the failed run to end", fc.stopped, 10*time.Second)
		waitFor(t, "the restart to be scheduled", 10*time.Second, func() bool { return clock.hasWaiter(now.Add(backoff)) })
		mfs, _ = scrape(t, a.url)
		if got := must(t, mfs, "lifeboat_capture_restarts_total"); got != float64(i+1) {
			t.Errorf("restarts_total = %v, want %d", got, i+1)
		}
		if got := must(t, mfs, "lifeboat_capture_up"); got != 0 {
			t.Errorf("lifeboat_capture_up while restarting = %v, want 0", got)
		}
		select {
		case <-fc.started:
			t.Fatal("started again before the backoff passed")
		default:
		}
		clock.Advance(backoff)
		h = recv(t, "the capture job to start again", fc.started, 10*time.Second)
		if tok, _ := h.Token(); tok != t0.UnixNano() {
			t.Errorf("token after a restart = %d, want the same %d (same process)", tok, t0.UnixNano())
		}
	}
	if !strings.Contains(logs.String(), "capture failed; starting it again") {
		t.Error("the restart was not logged")
	}

	s := getStatus(t, a.url)
	c := s.Capture
	if c == nil {
		t.Fatal("/status has no capture section")
	}
	if !c.Active || c.Restarts != 2 || c.LastError != "failure 2" || c.LastGap != string(capture.GapCompacted) || c.Token != t0.UnixNano() ||
		c.LagSeconds == nil || *c.LagSeconds != 43 || c.RecoveryPoint == nil || !c.RecoveryPoint.Equal(t0.Add(3*time.Second)) {
		t.Errorf("/status capture = %+v", c)
	}

	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	if r := recv(t, "the capture job to stop", fc.stopped, 10*time.Second); !errors.Is(r.err, context.Canceled) {
		t.Errorf("capture ended with %v, want its context cancelled", r.err)
	}
	if got := must(t, gather(t, a.reg), "lifeboat_capture_lag_seconds"); !math.IsNaN(got) {
		t.Errorf("lag after the agent stopped = %v, want NaN (not capturing)", got)
	}
}

// TestCaptureOffMetrics: without capture the capture metrics are there
// (one set of metrics for every agent) and say so: enabled 0, up 0, lag
// NaN; /status has no capture section; and RunOnce refuses capture.
func TestCaptureOffMetrics(t *testing.T) {
	lg, _ := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	a := start(t, Config{Backups: b, Listen: "127.0.0.1:0"}, lg)
	mfs, _ := scrape(t, a.url)
	if got := must(t, mfs, "lifeboat_capture_enabled"); got != 0 {
		t.Errorf("lifeboat_capture_enabled = %v, want 0", got)
	}
	if got := must(t, mfs, "lifeboat_capture_lag_seconds"); !math.IsNaN(got) {
		t.Errorf("lifeboat_capture_lag_seconds = %v, want NaN", got)
	}
	if s := getStatus(t, a.url); s.Capture != nil {
		t.Errorf("/status capture = %+v, want none", s.Capture)
	}

	if _, err := New(Config{Backups: b, Capture: newFakeCapture().run}, lg); err == nil || !strings.Contains(err.Error(), "capture needs the snapshot job") {
		t.Errorf("New with capture and no snapshot job: %v", err)
	}
	once, err := New(Config{Backups: b, Snapshot: &backup.Job{Backups: b}, Capture: newFakeCapture().run}, lg)
	if err != nil {
		t.Fatal(err)
	}
	if err := once.RunOnce(t.Context()); !errors.Is(err, ErrCaptureOnce) {
		t.Errorf("RunOnce with capture = %v, want ErrCaptureOnce", err)
	}
}

// TestCaptureFollowsTheLock runs two agents with the lock against a real
// etcd: only the holder captures (the standby's lag is NaN); when the
// holder loses the lock (its lease revoked in etcd, as when it expires)
// its capture stops within the TTL and its Token says "lost"; the other
// agent then captures with a higher token.
func TestCaptureFollowsTheLock(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 50)
	cc, err := f.etcdConfig().ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 5 * time.Second
	type agentRun struct {
		*running
		fc *fakeCapture
	}
	agents := make([]agentRun, 2)
	for i := range agents {
		lg, _ := testLogger(t)
		cfg := f.config(t, lg)
		cfg.Prune, cfg.Drill = nil, nil
		cfg.Schedules = Schedules{}
		cfg.Identity = fmt.Sprintf("agent-%d", i+1)
		cfg.Lock = &LockConfig{Etcd: cc, TTL: ttl, Identity: cfg.Identity}
		fc := newFakeCapture()
		cfg.Capture = fc.run
		agents[i] = agentRun{start(t, cfg, lg), fc}
	}
	var lead, other agentRun
	var h CaptureHooks
	select {
	case h = <-agents[0].fc.started:
		lead, other = agents[0], agents[1]
	case h = <-agents[1].fc.started:
		lead, other = agents[1], agents[0]
	case <-time.After(time.Minute):
		t.Fatal("no agent started capturing within a minute")
	}
	tok1, held := h.Token()
	if !held || tok1 <= 0 {
		t.Fatalf("leader's Token() = %d, %v", tok1, held)
	}
	h.Report(capture.Status{Running: true, Revision: 10, RecoveryPoint: time.Now()})
	if got := must(t, gather(t, other.reg), "lifeboat_capture_lag_seconds"); !math.IsNaN(got) {
		t.Errorf("standby's lag = %v, want NaN (it does not capture)", got)
	}
	if got := must(t, gather(t, lead.reg), "lifeboat_capture_lag_seconds"); math.IsNaN(got) || got < 0 {
		t.Errorf("leader's lag = %v, want a number ≥ 0", got)
	}
	if got := must(t, gather(t, lead.reg), "lifeboat_capture_up"); got != 1 {
		t.Errorf("leader's lifeboat_capture_up = %v, want 1", got)
	}
	if st := getStatus(t, other.url); st.Capture == nil || st.Capture.Active || st.Capture.LagSeconds != nil {
		t.Errorf("standby /status capture = %+v, want inactive without lag", st.Capture)
	}
	select {
	case <-other.fc.started:
		t.Fatal("the standby started capturing while the other agent holds the lock")
	default:
	}

	// The leader's lease goes away in etcd.
	cli := f.etcd.Client(t)
	resp, err := cli.Get(t.Context(), LockPrefix+testCluster+"/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("lock key: %v %v", resp, err)
	}
	if resp.Kvs[0].CreateRevision != tok1 {
		t.Errorf("token %d, want the holder key's create revision %d", tok1, resp.Kvs[0].CreateRevision)
	}
	lost := time.Now()
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	r := recv(t, "the former leader's capture to stop (within the lock TTL)", lead.fc.stopped, ttl)
	t.Logf("capture stopped %v after the lease was revoked (TTL %v)", time.Since(lost).Round(10*time.Millisecond), ttl)
	if r.held || r.token != tok1 {
		t.Errorf("former leader's Token() after the loss = %d, %v; want %d, false", r.token, r.held, tok1)
	}
	// The standby's key is now the oldest: it takes over.
	h2 := recv(t, "the other agent to capture", other.fc.started, time.Minute)
	tok2, held2 := h2.Token()
	if !held2 || tok2 <= tok1 {
		t.Errorf("new holder's Token() = %d, %v; want above %d, true", tok2, held2, tok1)
	}
	waitFor(t, "the former leader's capture metrics to clear", 10*time.Second, func() bool {
		return math.IsNaN(must(t, gather(t, lead.reg), "lifeboat_capture_lag_seconds")) &&
			must(t, gather(t, lead.reg), "lifeboat_capture_up") == 0
	})
	if n := lead.fc.most.Load(); n > 1 {
		t.Errorf("%d capture runs at once in one agent", n)
	}
	if got := must(t, gather(t, lead.reg), "lifeboat_capture_restarts_total"); got != 0 {
		t.Errorf("a lost lock counted as %v restarts, want 0", got)
	}
}

// overlapStore records how many data objects of snapshots are being
// written at once.
type overlapStore struct {
	uploader.Store
	now, most atomic.Int32
}

func (s *overlapStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/snapshots/") && !strings.HasSuffix(key, ".json") {
		n := s.now.Add(1)
		defer s.now.Add(-1)
		for {
			m := s.most.Load()
			if n <= m || s.most.CompareAndSwap(m, n) {
				break
			}
		}
	}
	return s.Store.Put(ctx, key, r, opts)
}

// TestCaptureSnapshotIsASnapshotRun: capture's fresh snapshots go through
// the snapshot job against real etcd: each one a committed backup, counted
// as a snapshot run, never at the same time as a scheduled one (@every 1s
// here), which is skipped meanwhile as any overlapping run is.
func TestCaptureSnapshotIsASnapshotRun(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	dir, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := &overlapStore{Store: dir}
	f := newFixture(t, st, 200)
	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 1s"}
	var mu sync.Mutex
	var got []*repository.Manifest
	done := make(chan error, 1)
	cfg.Capture = func(ctx context.Context, h CaptureHooks) error {
		for range 4 {
			m, err := h.Snapshot(ctx)
			if err != nil {
				done <- err
				return err
			}
			mu.Lock()
			got = append(got, m)
			mu.Unlock()
		}
		done <- nil
		<-ctx.Done()
		return ctx.Err()
	}
	a := start(t, cfg, lg)
	if err := recv(t, "capture's 4 snapshots", done, 2*time.Minute); err != nil {
		t.Fatalf("capture snapshot: %v", err)
	}
	// Let the schedule run alongside for a few more backups.
	waitFor(t, "scheduled snapshots besides capture's", time.Minute, func() bool {
		return must(t, gather(t, a.reg), "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess) >= 6
	})
	if err, _ := a.stop(t); err != nil {
		t.Errorf("Run: %v", err)
	}
	ids := manifests(t, f.backups)
	for _, m := range got {
		if m == nil || !containsID(ids, m.ID) {
			t.Errorf("capture's snapshot %v is not a committed backup in the store (%v)", m, ids)
		}
	}
	runs := must(t, gather(t, a.reg), "lifeboat_job_runs_total", JobLabel, JobSnapshot, "result", ResultSuccess)
	if float64(len(ids)) != runs {
		t.Errorf("%d backups in the store, %v successful snapshot runs: capture's snapshots are not counted as runs", len(ids), runs)
	}
	if n := st.most.Load(); n != 1 {
		t.Errorf("%d snapshot data objects written at once, want 1", n)
	}
}

func containsID(ids []string, id string) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// TestCaptureWithoutLockFinalFlush: an agent without the leader lock
// (--lock=false) stores what its capture buffered when it stops: the
// token stays valid through shutdown, only a lost lock stops writing.
// (Before, the token said "lost" as soon as the agent's context ended,
// and the final flush was refused: the buffered revisions were lost.)
func TestCaptureWithoutLockFinalFlush(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 10)
	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{}
	var stats capture.Stats
	sess, err := snapshot.Dial(t.Context(), f.etcdConfig(), lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	cfg.Capture = func(ctx context.Context, h CaptureHooks) error {
		return capture.Run(ctx, capture.Job{
			Session: sess, Repo: f.backups, Encoding: repository.Encoding{Compression: "zstd"},
			// No flush on a tick within the test: what is stored at the
			// end was stored by the final flush.
			Interval: time.Hour,
			Token:    h.Token, Snapshot: h.Snapshot, Report: h.Report, Stats: &stats,
		}, lg)
	}
	a := start(t, cfg, lg)
	waitFor(t, "a capture generation", time.Minute, func() bool { return stats.Markers.Load() > 0 })
	cli := f.etcd.Client(t)
	var last int64
	var buffered int64
	for i := range 10 {
		k, v := fmt.Sprintf("/registry/final/%d", i), "buffered"
		r, err := cli.Put(t.Context(), k, v)
		if err != nil {
			t.Fatal(err)
		}
		last, buffered = r.Header.Revision, buffered+int64(len(k)+len(v)+32)
	}
	// Every revision handled and buffered, none queued: the buffer holds
	// exactly their ops.
	waitFor(t, "the writes buffered", time.Minute, func() bool { return stats.BufferedBytes.Load() == buffered })
	if n := stats.Segments.Load(); n != 0 {
		t.Fatalf("%d segments stored before the stop: want none (interval 1h)", n)
	}
	if err, _ := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	l, err := f.backups.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := f.backups.Windows(t.Context(), l)
	if err != nil || len(ws) != 1 {
		t.Fatalf("windows %v %v: want 1", ws, err)
	}
	if ws[0].Through < last || ws[0].Problem != "" {
		t.Errorf("window %+v: want it through the last buffered revision %d (stored at the stop)", ws[0], last)
	}
}
