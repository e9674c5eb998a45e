package restore_test

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"filippo.io/age"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestPointInTimeProperty is the property test of point-in-time restore:
// random workloads (puts of 1–4 KiB values, deletes, multi-op
// transactions, delete-range, leases granted, attached, revoked and left
// to expire, compactions) against a real etcd while the real capture job
// (capture.Run) writes to a real store; then, for random revisions R in
// every recoverable window, PlanPointInTime + Replay rebuild the state at
// R, and it equals the source's at R key by key (value, create and mod
// revision, version, lease) and by HashKV over the same compaction. The
// same under faults, one subtest each, after which the store's chain
// checks (VerifyChanges) pass for every generation.
//
// LIFEBOAT_PROP_SEED=N reruns a seed (the seed is logged, and repeated
// on failure); -short runs fewer steps and targets.
func TestPointInTimeProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("LIFEBOAT_PROP_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("LIFEBOAT_PROP_SEED=%q: want an unsigned integer", v)
		}
		seed = n
	}
	began := time.Now()
	var compared atomic.Int64
	t.Cleanup(func() {
		t.Logf("seed %d: %d points in time compared in %s", seed, compared.Load(), time.Since(began).Round(time.Millisecond))
		if t.Failed() {
			t.Logf("failed with seed %d: rerun with LIFEBOAT_PROP_SEED=%d", seed, seed)
		}
	})
	steps, perWindow := 160, 14
	if testing.Short() {
		steps, perWindow = 60, 4
	}
	ctx := t.Context()

	t.Run("workload", func(t *testing.T) {
		e := newPropEnv(t, seed, &compared, nil, false)
		e.start(nil, nil, 3)
		gen := e.waitGeneration("")
		e.run(steps, true)
		// The booted member keeps time: let the short leases expire
		// first, so that its lessor does not delete keys while it is
		// compared.
		e.waitExpired()
		cur := restoretest.Revision(t, e.Cli)
		e.waitDurable(cur)
		e.stopOK()
		e.noGaps()
		ws := e.verify(1)
		if ws[0].Generation != gen {
			t.Fatalf("window of generation %s, want %s", ws[0].Generation, gen)
		}
		e.compare(ws[0], perWindow)
		_, path := replayTo(t, e.PITRSource, restore.Target{Revision: cur})
		checkBooted(t, e.PITRSource, path, cur)
		compared.Add(1)
	})

	t.Run("watch cut and resumed", func(t *testing.T) {
		e := newPropEnv(t, seed+1, &compared, nil, false)
		// Each connection is also reset after 1 MiB, a member dying in
		// the middle of a response; the catch-up after a cut is far
		// smaller, so every new connection makes progress.
		px := etcdtest.NewProxy(t, e.C.Members[0].ClientURL, etcdtest.ProxyOptions{CutAfter: 1 << 20})
		e.start([]string{px.URL}, nil, 3)
		e.waitGeneration("")
		for range 6 {
			e.run(steps/6, true)
			// Cut while capture is receiving, or between revisions.
			px.Cut()
		}
		e.run(steps/6, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		reconnects := e.stats.Reconnects.Load()
		e.stopOK()
		if px.Cuts() == 0 || reconnects == 0 {
			t.Fatalf("%d cuts, %d reconnects: want the watch cut and resumed", px.Cuts(), reconnects)
		}
		e.noGaps()
		e.compare(e.verify(1)[0], perWindow)
	})

	t.Run("killed mid-segment and restarted", func(t *testing.T) {
		e := newPropEnv(t, seed+2, &compared, nil, false)
		kills := 0
		var gen string
		for range 3 {
			ks := &killableStore{Store: e.Repo.Store}
			e.start(nil, &repository.Repo{Store: ks, Cluster: e.Repo.Cluster}, 3)
			if g := e.waitGeneration(""); gen == "" {
				gen = g
			} else if g != gen {
				t.Fatalf("restarted capture writes generation %s, want %s continued", g, gen)
			}
			// Some of it stored, then more that may not be.
			e.run(steps/8, true)
			e.waitDurable(restoretest.Revision(t, e.Cli))
			e.run(steps/8, true)
			// Killed while it holds changes it has not stored.
			for i := 0; e.stats.BufferedBytes.Load() == 0; i++ {
				if i > 1000 {
					t.Fatal("capture never held unstored changes after 1000 steps")
				}
				e.w.Step(ctx)
			}
			ks.kill()
			e.stopKilled()
			kills++
			// Written while no agent runs: the next one reads them from
			// etcd's history.
			e.run(10, false)
		}
		e.start(nil, nil, 3)
		e.run(steps/4, true)
		e.waitExpired() // before the boot, as above
		cur := restoretest.Revision(t, e.Cli)
		e.waitDurable(cur)
		e.stopOK()
		e.noGaps()
		w := e.verify(1)[0]
		if w.Generation != gen || kills != 3 {
			t.Fatalf("window of generation %s after %d kills, want %s continued", w.Generation, kills, gen)
		}
		e.compare(w, perWindow)
		_, path := replayTo(t, e.PITRSource, restore.Target{Revision: cur})
		checkBooted(t, e.PITRSource, path, cur)
		compared.Add(1)
	})

	t.Run("lock handed to a second agent", func(t *testing.T) {
		e := newPropEnv(t, seed+3, &compared, nil, false)
		e.start(nil, nil, 3)
		gen := e.waitGeneration("")
		e.run(steps/4, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		e.run(steps/4, true)
		// The first agent loses the lock in the middle of the workload
		// and stops writing; writes go on while no agent holds it.
		e.token.Store(0)
		for i := 0; ; i++ {
			if err, ok := e.stopped(); ok {
				if !errors.Is(err, capture.ErrLockLost) {
					t.Fatalf("first agent after the lock was lost: %v, want ErrLockLost", err)
				}
				break
			}
			if i > 2000 {
				t.Fatal("the first agent did not stop after the lock was lost")
			}
			e.w.Step(ctx)
		}
		e.run(10, false)
		e.start(nil, nil, 4)
		if g := e.waitGeneration(""); g != gen {
			t.Fatalf("second agent writes generation %s, want %s continued", g, gen)
		}
		e.run(steps/2, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		e.stopOK()
		// A handover is no gap: nothing may count or alert one.
		if got := e.gaps(); len(got) != 0 {
			t.Errorf("gaps %v: want none (the lock moved, the chain goes on)", got)
		}
		w := e.verify(1)[0]
		// Both agents wrote to the one chain, the second with its higher
		// token.
		tokens := map[int64]int{}
		for _, si := range w.Segments {
			s, _, err := e.Repo.ReadSegment(ctx, si, e.IDs)
			if err != nil {
				t.Fatal(err)
			}
			tokens[s.Token]++
		}
		if len(tokens) != 2 || tokens[3] == 0 || tokens[4] == 0 {
			t.Errorf("segments by token %v: want both agents' (3 and 4)", tokens)
		}
		e.compare(w, perWindow)
	})

	t.Run("store stopped and restarted", func(t *testing.T) {
		srv := s3test.Start(t)
		e := newPropEnv(t, seed+4, &compared, restoretest.S3Repo(t, srv), true)
		e.start(nil, nil, 3)
		e.waitGeneration("")
		e.run(steps/3, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		srv.Stop()
		// No compaction while the store is down: the capture cannot make
		// anything durable, and holds what it reads (up to its bound).
		e.run(steps/3, false)
		e.waitFor("a store error reported", func(s capture.Status) bool { return s.Err != nil })
		srv.Restart(t)
		e.run(steps/3, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		e.stopOK()
		e.noGaps()
		ws := e.verify(1)
		e.compare(ws[0], perWindow)
		if len(ws[0].Segments) > 0 && !strings.HasSuffix(ws[0].Segments[0].Object.Key, ".age") {
			t.Errorf("segment %s is not encrypted", ws[0].Segments[0].Object.Key)
		}
	})

	t.Run("compacted while disconnected", func(t *testing.T) {
		e := newPropEnv(t, seed+5, &compared, nil, false)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gl := &refusingListener{Listener: ln}
		px := etcdtest.NewProxy(t, e.C.Members[0].ClientURL, etcdtest.ProxyOptions{Listener: gl})
		e.start([]string{px.URL}, nil, 3)
		gen1 := e.waitGeneration("")
		e.run(steps/2, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		// The member becomes unreachable: the watch's connection is cut
		// and reconnects are refused.
		e.candidates = append(e.candidates, restoretest.Revision(t, e.Cli)) // the sealed point
		gl.refuse.Store(true)
		if px.Cut() == 0 {
			t.Fatal("no connection to cut")
		}
		// Revisions the watch never received, then compacted away.
		e.run(20, false)
		e.compactTo(restoretest.Revision(t, e.Cli))
		gl.refuse.Store(false)
		gen2 := e.waitGeneration(gen1)
		e.run(steps/2, true)
		e.waitDurable(restoretest.Revision(t, e.Cli))
		e.stopOK()
		if got := e.gaps(); len(got) != 1 || got[0] != capture.GapCompacted {
			t.Fatalf("gaps %v: want [%s]", got, capture.GapCompacted)
		}
		ws := e.verify(2)
		if ws[0].Generation != gen1 || !ws[0].Sealed || ws[0].SealReason != string(capture.GapCompacted) {
			t.Errorf("first window %s sealed %v (%s): want %s sealed as %s", ws[0].Generation, ws[0].Sealed, ws[0].SealReason, gen1, capture.GapCompacted)
		}
		if ws[1].Generation != gen2 || ws[1].Sealed {
			t.Errorf("second window %s sealed %v: want %s open", ws[1].Generation, ws[1].Sealed, gen2)
		}
		if ws[0].Through+1 >= ws[1].From {
			t.Fatalf("windows %d-%d and %d-%d: want a gap between them", ws[0].From, ws[0].Through, ws[1].From, ws[1].Through)
		}
		e.compare(ws[0], perWindow)
		e.compare(ws[1], perWindow)
		// Inside the gap: refused, never restored from either side.
		l, err := e.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		gap := []int64{ws[0].Through + 1, ws[1].From - 1}
		for range 3 {
			gap = append(gap, ws[0].Through+1+e.rnd.Int64N(ws[1].From-ws[0].Through-1))
		}
		for _, r := range gap {
			p, err := restore.PlanPointInTime(ctx, e.Repo, l, restore.Target{Revision: r}, e.IDs)
			var oe *restore.OutsideWindowsError
			if !errors.As(err, &oe) || !strings.Contains(err.Error(), "in a gap") {
				t.Errorf("plan to %d in the gap %d-%d: %v (plan %+v), want an OutsideWindowsError in a gap", r, ws[0].Through+1, ws[1].From-1, err, p)
			}
		}
	})
}

// propEnv is one run of the property test: a real etcd with a random
// workload (pitrSource, workload), the real capture job writing to a
// store, and the source states of the revisions a compaction took away.
type propEnv struct {
	*restoretest.PITRSource
	t        *testing.T
	w        *restoretest.Workload
	rnd      *rand.Rand // targets
	enc      repository.Encoding
	cfg      snapshot.Config // the member itself (snapshots, and capture unless told otherwise)
	spool    string
	compared *atomic.Int64
	// candidates are revisions after workload steps: targets whose state
	// compactTo records before it takes them away.
	candidates []int64

	token atomic.Int64 // the fencing token; <= 0: the lock is lost
	stats *capture.Stats

	mu       sync.Mutex
	statuses []capture.Status

	cancel context.CancelFunc
	done   chan error
}

func newPropEnv(t *testing.T, seed uint64, compared *atomic.Int64, repo *repository.Repo, encrypt bool) *propEnv {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	id := restoretest.NewIdentity(t)
	if repo == nil {
		repo = restoretest.DirRepo(t, t.TempDir())
	}
	enc := repository.Encoding{Compression: "zstd"}
	if encrypt {
		enc = restoretest.AgeEncoding(id)
	}
	e := &propEnv{
		PITRSource: &restoretest.PITRSource{C: c, Cli: cli, Repo: repo, IDs: []age.Identity{id}, Recorded: map[int64]restoretest.LiveState{}},
		t:          t,
		w: &restoretest.Workload{T: t, Cli: cli, Rnd: rand.New(rand.NewPCG(seed, 1)), Keys: map[string]bool{},
			ValueMin: 1 << 10, ValueMax: 4 << 10, Expiring: true},
		rnd:      rand.New(rand.NewPCG(seed, 2)),
		enc:      enc,
		cfg:      snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second},
		spool:    t.TempDir(),
		compared: compared,
	}
	// Before the first snapshot: keys, leases.
	for range 20 {
		e.w.Step(t.Context())
	}
	t.Cleanup(func() { _ = e.stop() })
	return e
}

// start runs capture.Run with token against endpoints (nil: the member)
// writing to repo (nil: e.repo).
func (e *propEnv) start(endpoints []string, repo *repository.Repo, token int64) {
	t := e.t
	t.Helper()
	if e.cancel != nil {
		t.Fatal("capture already running")
	}
	if repo == nil {
		repo = e.Repo
	}
	cfg := e.cfg
	if endpoints != nil {
		cfg.Endpoints = endpoints
	}
	lg, _ := jobtest.Logger(t)
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := snapshot.Dial(ctx, cfg, lg)
	if err != nil {
		cancel()
		t.Fatalf("dial %v: %v", cfg.Endpoints, err)
	}
	e.token.Store(token)
	e.stats = &capture.Stats{}
	job := capture.Job{
		Session: sess, Repo: repo, Encoding: e.enc,
		Interval: 150 * time.Millisecond, MaxSegmentBytes: 64 << 10, MaxBufferBytes: 512 << 10,
		Token: func() (int64, bool) {
			tok := e.token.Load()
			return tok, tok > 0
		},
		Snapshot: func(ctx context.Context) (*repository.Manifest, error) {
			return backup.Run(ctx, backup.Job{Etcd: e.cfg, SpoolDir: e.spool, Backups: repo, Encoding: e.enc, Version: "test"}, lg)
		},
		Report: func(s capture.Status) {
			e.mu.Lock()
			e.statuses = append(e.statuses, s)
			e.mu.Unlock()
		},
		Stats: e.stats,
	}
	done := make(chan error, 1)
	go func() {
		err := capture.Run(ctx, job, lg)
		sess.Close()
		done <- err
	}()
	e.cancel, e.done = cancel, done
}

// stop cancels the running capture and returns Run's error.
func (e *propEnv) stop() error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		return err
	case <-time.After(60 * time.Second):
		e.t.Fatal("capture did not stop within 60s of its context's end")
		return nil
	}
}

func (e *propEnv) stopOK() {
	e.t.Helper()
	if err := e.stop(); err != nil {
		e.t.Fatalf("capture: %v", err)
	}
}

// stopKilled ends a capture whose store was killed: whatever Run says
// about the changes it could not store, it must return.
func (e *propEnv) stopKilled() {
	e.t.Helper()
	if err := e.stop(); err != nil {
		e.t.Logf("killed capture: %v", err)
	}
}

// stopped reports whether Run returned on its own, with its error.
func (e *propEnv) stopped() (error, bool) {
	select {
	case err := <-e.done:
		e.cancel()
		e.cancel = nil
		return err, true
	default:
		return nil, false
	}
}

func (e *propEnv) last() capture.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.statuses) == 0 {
		return capture.Status{}
	}
	return e.statuses[len(e.statuses)-1]
}

func (e *propEnv) gaps() []capture.GapReason {
	e.mu.Lock()
	defer e.mu.Unlock()
	var g []capture.GapReason
	for _, s := range e.statuses {
		if s.Gap != "" {
			g = append(g, s.Gap)
		}
	}
	return g
}

func (e *propEnv) noGaps() {
	e.t.Helper()
	if g := e.gaps(); len(g) > 0 {
		e.t.Fatalf("gaps %v: want none", g)
	}
}

// waitFor polls the capture's last status against a deadline.
func (e *propEnv) waitFor(what string, ok func(capture.Status) bool) capture.Status {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if s := e.last(); ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("capture: no %s in 60s (last status %+v)", what, e.last())
		}
		time.Sleep(20 * time.Millisecond) // polling the capture's reports against a deadline
	}
}

// waitGeneration waits for the capture to run a generation other than
// old, and returns it. Its anchor's revision becomes a candidate target.
func (e *propEnv) waitGeneration(old string) string {
	e.t.Helper()
	s := e.waitFor("generation after "+strconv.Quote(old), func(s capture.Status) bool {
		return s.Running && s.Generation != "" && s.Generation != old
	})
	for _, w := range e.windows() {
		if w.Generation == s.Generation {
			e.candidates = append(e.candidates, w.From)
		}
	}
	return s.Generation
}

// durable is the capture's durable captured-through revision (0 before
// a generation).
func (e *propEnv) durable() int64 {
	return e.last().Revision
}

// run drives n random workload steps. With compact, now and then the
// source is compacted to a random revision the capture has made durable
// (the watch never needs a revision before it).
func (e *propEnv) run(n int, compact bool) {
	ctx := e.t.Context()
	for range n {
		e.w.Step(ctx)
		if e.rnd.IntN(3) == 0 {
			e.candidates = append(e.candidates, restoretest.Revision(e.t, e.Cli))
		}
		if compact && e.rnd.IntN(25) == 0 {
			if d := e.durable(); d > e.Compact {
				e.compactTo(e.Compact + 1 + e.rnd.Int64N(d-e.Compact))
			}
		}
	}
}

// compactTo compacts the source to rev, first recording the states of
// the candidate targets it takes away.
func (e *propEnv) compactTo(rev int64) {
	t := e.t
	t.Helper()
	for _, r := range e.candidates {
		if _, ok := e.Recorded[r]; !ok && r >= e.Compact && r < rev {
			e.Record(t, r)
		}
	}
	if _, err := e.Cli.Compact(t.Context(), rev); err != nil {
		t.Fatalf("compact to %d: %v", rev, err)
	}
	e.Compact = rev
}

// waitExpired waits until etcd has revoked every lease workload.expiring
// granted (their keys are gone).
func (e *propEnv) waitExpired() {
	t := e.t
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := e.Cli.Get(t.Context(), "/registry/events/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if g.Count == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d keys of expiring leases left after 30s", g.Count)
		}
		time.Sleep(50 * time.Millisecond) // polling etcd's lessor against a deadline
	}
}

func (e *propEnv) windows() []repository.Window {
	t := e.t
	t.Helper()
	l, err := e.Repo.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ws, err := e.Repo.Windows(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// waitDurable waits until the newest window is recoverable through rev.
func (e *propEnv) waitDurable(rev int64) {
	t := e.t
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ws := e.windows()
		if n := len(ws); n > 0 && ws[n-1].Recoverable() && ws[n-1].Through >= rev {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture not durable through %d in 60s: windows %v, last status %+v", rev, ws, e.last())
		}
		time.Sleep(50 * time.Millisecond) // polling the store against a deadline
	}
}

// verify checks every generation in the store (VerifyChanges: each
// segment read, the chain from the anchor, the markers) and that there
// are n windows, each recoverable, with nothing stray or broken.
func (e *propEnv) verify(n int) []repository.Window {
	t := e.t
	t.Helper()
	ws := e.windows()
	for _, w := range ws {
		c, err := e.Repo.VerifyChanges(t.Context(), w, e.IDs)
		if err != nil {
			t.Fatalf("verify generation %s: %v", w.Generation, err)
		}
		if c.Problem != nil {
			t.Errorf("generation %s: %v (at %s, revisions %d-%d)", w.Generation, c.Problem, c.ProblemKey, c.ProblemFrom, c.ProblemTo)
		}
		if c.Through != w.Through {
			t.Errorf("generation %s verified through %d, its window through %d", w.Generation, c.Through, w.Through)
		}
		if !w.Recoverable() || w.Problem != "" || len(w.Stray) > 0 || len(w.Segments) == 0 {
			t.Errorf("window %s: recoverable %v, problem %q, %d stray, %d segments", w.Generation, w.Recoverable(), w.Problem, len(w.Stray), len(w.Segments))
		}
	}
	if len(ws) != n {
		t.Fatalf("%d windows %v, want %d", len(ws), ws, n)
	}
	return ws
}

// targets picks up to n random revisions of w whose source state is
// known: the window's ends, recorded states, and any revision the source
// still holds.
func (e *propEnv) targets(w repository.Window, n int) []int64 {
	known := func(r int64) bool {
		_, ok := e.Recorded[r]
		return r >= e.Compact || ok
	}
	set := map[int64]bool{}
	for _, r := range []int64{w.From, w.From + 1, w.Through} {
		if w.Contains(r) && known(r) {
			set[r] = true
		}
	}
	var old []int64
	for r := range e.Recorded {
		if w.Contains(r) && r < e.Compact {
			old = append(old, r)
		}
	}
	slices.Sort(old)
	e.rnd.Shuffle(len(old), func(i, j int) { old[i], old[j] = old[j], old[i] })
	// Half of them compacted away on the source (all when the whole
	// window is), half still live.
	lo := max(w.From, e.Compact)
	recorded := n
	if lo <= w.Through {
		recorded = n / 2
	}
	for _, r := range old {
		if len(set) >= recorded {
			break
		}
		set[r] = true
	}
	if lo <= w.Through {
		for range 4 * n {
			if len(set) >= n {
				break
			}
			set[lo+e.rnd.Int64N(w.Through-lo+1)] = true
		}
	}
	var rs []int64
	for r := range set {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// compare restores random revisions of w and compares each with the
// source.
func (e *propEnv) compare(w repository.Window, n int) {
	t := e.t
	t.Helper()
	rs := e.targets(w, n)
	if len(rs) < min(n, int(w.Through-w.From+1))/2 {
		t.Errorf("only %d known targets %v in window %d-%d (compacted to %d)", len(rs), rs, w.From, w.Through, e.Compact)
	}
	for _, r := range rs {
		p, path := replayTo(t, e.PITRSource, restore.Target{Revision: r})
		if p.Revision != r || p.Window.Generation != w.Generation {
			t.Errorf("plan to %d: revision %d in generation %s, want %s", r, p.Revision, p.Window.Generation, w.Generation)
		}
		checkOffline(t, e.PITRSource, path, r)
		e.compared.Add(1)
	}
	t.Logf("generation %s: %d points in time in %d-%d compared (%v)", w.Generation, len(rs), w.From, w.Through, rs)
}

// killableStore passes calls to a store until kill; after it every call
// fails, and a Put under way fails in the middle of its body: the
// process writing died. What the store holds is what it had made durable.
type killableStore struct {
	uploader.Store
	dead atomic.Bool
}

var errKilled = errors.New("the writer was killed")

func (k *killableStore) kill() { k.dead.Store(true) }

func (k *killableStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if k.dead.Load() {
		return uploader.ObjectInfo{}, errKilled
	}
	return k.Store.Put(ctx, key, &killableReader{r: r, dead: &k.dead}, opts)
}

func (k *killableStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if k.dead.Load() {
		return nil, errKilled
	}
	return k.Store.Get(ctx, key)
}

func (k *killableStore) Stat(ctx context.Context, key string) (uploader.ObjectInfo, error) {
	if k.dead.Load() {
		return uploader.ObjectInfo{}, errKilled
	}
	return k.Store.Stat(ctx, key)
}

func (k *killableStore) List(ctx context.Context, prefix string, fn func(uploader.ObjectInfo) error) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.List(ctx, prefix, fn)
}

func (k *killableStore) Delete(ctx context.Context, key string) error {
	if k.dead.Load() {
		return errKilled
	}
	return k.Store.Delete(ctx, key)
}

type killableReader struct {
	r    io.Reader
	dead *atomic.Bool
}

func (r *killableReader) Read(p []byte) (int, error) {
	if r.dead.Load() {
		return 0, errKilled
	}
	return r.r.Read(p)
}

// refusingListener closes the connections it accepts while refuse is
// set: the member unreachable.
type refusingListener struct {
	net.Listener
	refuse atomic.Bool
}

func (l *refusingListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || !l.refuse.Load() {
			return c, err
		}
		c.Close()
	}
}

// TestPointInTimeHandoverBeforeFirstSegment hands the lock to a second
// agent before the first one stored a segment of its new generation: the
// second continues that generation from its snapshot, as it does once a
// segment is stored, so that the revisions after the snapshot stay
// recoverable while etcd still has them (not a second generation from a
// fresh snapshot, with the revisions between the two snapshots out of
// every window).
func TestPointInTimeHandoverBeforeFirstSegment(t *testing.T) {
	var compared atomic.Int64
	e := newPropEnv(t, uint64(time.Now().UnixNano()), &compared, nil, false)
	e.start(nil, nil, 3)
	gen := e.waitGeneration("")
	e.token.Store(0)
	for i := 0; ; i++ {
		if err, ok := e.stopped(); ok {
			if !errors.Is(err, capture.ErrLockLost) {
				t.Fatalf("first agent after the lock was lost: %v, want ErrLockLost", err)
			}
			break
		}
		if i > 2000 {
			t.Fatal("the first agent did not stop after the lock was lost")
		}
		e.w.Step(t.Context())
	}
	e.start(nil, nil, 4)
	g := e.waitGeneration("")
	e.run(20, false)
	e.waitDurable(restoretest.Revision(t, e.Cli))
	e.stopOK()
	if g != gen {
		t.Fatalf("second agent writes generation %s, want %s (the first agent's, with nothing stored yet) continued", g, gen)
	}
	e.compare(e.verify(1)[0], 4)
}
