package capture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// env is one capture under test: a real etcd, a store, a Run in the
// background and what it reported.
type env struct {
	t     *testing.T
	etcd  *etcdtest.Cluster
	cli   *clientv3.Client
	repo  *repository.Repo
	spool string
	token atomic.Int64
	lost  atomic.Bool
	// lostSeen: Token answered false at least once.
	lostSeen atomic.Bool
	stats    Stats

	mu       sync.Mutex
	statuses []Status

	cancel context.CancelFunc
	done   chan error
}

func newEnv(t *testing.T, st uploader.Store) *env {
	t.Helper()
	return newEnvOpts(t, st, etcdtest.Options{})
}

func newEnvOpts(t *testing.T, st uploader.Store, opts etcdtest.Options) *env {
	t.Helper()
	c := etcdtest.Start(t, opts)
	if st == nil {
		d, err := uploader.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		st = d
	}
	e := &env{t: t, etcd: c, cli: c.Client(t), repo: repository.New(st, jobtest.Cluster), spool: filepath.Join(t.TempDir(), "spool")}
	e.token.Store(7)
	// An empty cluster cannot be backed up (revision 0 has no snapshot).
	if _, err := e.cli.Put(t.Context(), "/seed", "s"); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) snapshotFunc(lg *slog.Logger) func(ctx context.Context) (*repository.Manifest, error) {
	return func(ctx context.Context) (*repository.Manifest, error) {
		return backup.Run(ctx, backup.Job{Etcd: e.config(e.etcd.Endpoints()), SpoolDir: e.spool, Backups: e.repo, Version: "test"}, lg)
	}
}

func (e *env) config(endpoints []string) snapshot.Config {
	return snapshot.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, User: e.etcd.User, Password: snapshot.Secret(e.etcd.Password)}
}

// start runs capture against endpoints (nil: the member itself).
func (e *env) start(endpoints []string, tune func(*Job)) {
	e.t.Helper()
	if endpoints == nil {
		endpoints = e.etcd.Endpoints()
	}
	lg, _ := jobtest.Logger(e.t)
	ctx, cancel := context.WithCancel(context.Background())
	sess, err := snapshot.Dial(ctx, e.config(endpoints), lg)
	if err != nil {
		e.t.Fatalf("Dial: %v", err)
	}
	job := Job{
		Session: sess, Repo: e.repo, Encoding: repository.Encoding{Compression: "zstd"},
		Interval: 100 * time.Millisecond, MaxSegmentBytes: 1 << 20, MaxBufferBytes: 4 << 20,
		Token: func() (int64, bool) {
			if e.lost.Load() {
				e.lostSeen.Store(true)
				return 0, false
			}
			return e.token.Load(), true
		},
		Snapshot: e.snapshotFunc(lg),
		Report: func(s Status) {
			e.mu.Lock()
			e.statuses = append(e.statuses, s)
			e.mu.Unlock()
		},
		Stats: &e.stats,
	}
	if tune != nil {
		tune(&job)
	}
	e.cancel = cancel
	e.done = make(chan error, 1)
	go func() {
		err := Run(ctx, job, lg)
		sess.Close()
		e.done <- err
	}()
	e.t.Cleanup(func() { e.stop() })
}

// stop ends the Run and returns its error.
func (e *env) stop() error {
	if e.cancel == nil {
		return nil
	}
	e.cancel()
	e.cancel = nil
	select {
	case err := <-e.done:
		return err
	case <-time.After(30 * time.Second):
		e.t.Fatal("Run did not return within 30s of its context's end")
		return nil
	}
}

func (e *env) last() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.statuses) == 0 {
		return Status{}
	}
	return e.statuses[len(e.statuses)-1]
}

func (e *env) gaps() []GapReason {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []GapReason
	for _, s := range e.statuses {
		if s.Gap != "" {
			out = append(out, s.Gap)
		}
	}
	return out
}

// waitFor polls cond against a deadline.
func (e *env) waitFor(what string, d time.Duration, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out after %s waiting for %s; last status %+v", d, what, e.last())
		}
		time.Sleep(20 * time.Millisecond) // polling, not waiting for an effect
	}
}

// liveRev is the cluster's current revision.
func (e *env) liveRev() int64 {
	e.t.Helper()
	r, err := e.cli.Get(e.t.Context(), "\x00", clientv3.WithLimit(1), clientv3.WithCountOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	return r.Header.Revision
}

// waitCaught waits until the durable revision reaches the live one.
func (e *env) waitCaught() int64 {
	e.t.Helper()
	rev := e.liveRev()
	e.waitFor(fmt.Sprintf("durable revision %d", rev), 30*time.Second, func() bool { return e.last().Revision >= rev })
	return rev
}

// workload writes puts, deletes, multi-op txns, a delete-range and keys
// with leases (one revoked, one kept).
func workload(t *testing.T, cli *clientv3.Client, n int) {
	t.Helper()
	ctx := t.Context()
	must := func(_ any, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	kept, err := cli.Grant(ctx, 600)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		k := fmt.Sprintf("/registry/pods/ns%d/p%d", i%3, i)
		must(cli.Put(ctx, k, strings.Repeat("v", 10+i%50)))
		must(cli.Put(ctx, k, fmt.Sprintf("second %d", i)))
		switch i % 5 {
		case 0:
			must(cli.Delete(ctx, k))
		case 1:
			must(cli.Txn(ctx).Then(
				clientv3.OpPut(k+"/a", "a"), clientv3.OpPut(k+"/b", "b", clientv3.WithLease(kept.ID)), clientv3.OpDelete(k),
			).Commit())
		case 2:
			must(cli.Put(ctx, k+"/lease", "l", clientv3.WithLease(gone.ID)))
		case 3:
			must(cli.Put(ctx, k+"/x", "\x00binary\xff"))
		}
	}
	must(cli.Delete(ctx, "/registry/pods/ns1/", clientv3.WithPrefix()))
	must(cli.Revoke(ctx, gone.ID))
	must(cli.Put(ctx, "/registry/leases/kept", "k", clientv3.WithLease(kept.ID)))
}

// stored reads generation gen's chain, checks it with CheckChain and
// returns its segments.
func (e *env) stored(gen string) []*repository.Segment {
	e.t.Helper()
	ctx := e.t.Context()
	infos, unnamed, err := e.repo.ListSegments(ctx, gen)
	if err != nil || len(unnamed) > 0 {
		e.t.Fatalf("ListSegments %s: %v (unnamed %v)", gen, err, unnamed)
	}
	var links []repository.ChainLink
	var segs []*repository.Segment
	for _, si := range infos {
		s, sum, err := e.repo.ReadSegment(ctx, si, nil)
		if err != nil {
			e.t.Fatalf("ReadSegment: %v", err)
		}
		links = append(links, repository.ChainLink{Key: si.Object.Key, Header: s.SegmentHeader, Hash: sum})
		segs = append(segs, s)
	}
	if err := repository.CheckChain(links); err != nil {
		e.t.Fatalf("CheckChain of generation %s: %v", gen, err)
	}
	return segs
}

// history is etcd's own history from..to as a clientv3 watch delivers it.
func (e *env) history(from, to int64) []repository.Revision {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), 30*time.Second)
	defer cancel()
	var out []repository.Revision
	for resp := range e.cli.Watch(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(from)) {
		if err := resp.Err(); err != nil {
			e.t.Fatalf("reference watch: %v", err)
		}
		for _, ev := range resp.Events {
			kv := ev.Kv
			if n := len(out); n == 0 || out[n-1].Revision != kv.ModRevision {
				out = append(out, repository.Revision{Revision: kv.ModRevision})
			}
			op := repository.Op{Key: kv.Key}
			if ev.Type == mvccpb.DELETE {
				op.Delete = true
			} else {
				op.Value, op.Lease, op.CreateRevision, op.Version = kv.Value, kv.Lease, kv.CreateRevision, kv.Version
			}
			r := &out[len(out)-1]
			r.Ops = append(r.Ops, op)
		}
		if n := len(out); n > 0 && out[n-1].Revision >= to {
			break
		}
	}
	return out
}

// checkExact compares the captured revisions with etcd's history.
func (e *env) checkExact(segs []*repository.Segment, from, to int64) {
	e.t.Helper()
	var got []repository.Revision
	for _, s := range segs {
		for _, r := range s.Revisions {
			if r.Revision <= to {
				r.Received = time.Time{}
				got = append(got, r)
			}
		}
	}
	want := e.history(from, to)
	for len(want) > 0 && want[len(want)-1].Revision > to {
		want = want[:len(want)-1] // the last watch response may reach past to
	}
	// reflect first: cmp walks megabytes of values byte by byte.
	if !reflect.DeepEqual(want, got) {
		e.t.Fatalf("captured revisions %d-%d differ from etcd's history (-want +got):\n%s", from, to, cmp.Diff(want, got))
	}
	for i, r := range got {
		if r.Revision != from+int64(i) {
			e.t.Fatalf("revision %d at index %d: want dense from %d", r.Revision, i, from)
		}
	}
}

func TestCaptureWorkload(t *testing.T) {
	for _, store := range []string{"dir", "s3", "dir-auth"} {
		t.Run(store, func(t *testing.T) {
			var st uploader.Store
			if store == "s3" {
				st, _ = jobtest.NewS3Store(t, s3test.Start(t), false)
			}
			e := newEnvOpts(t, st, etcdtest.Options{Auth: store == "dir-auth"})
			e.start(nil, nil)
			e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
			gen := e.last().Generation
			workload(t, e.cli, 60)
			live := e.waitCaught()
			if err := e.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			l, err := e.repo.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			ws, err := e.repo.Windows(t.Context(), l)
			if err != nil || len(ws) != 1 {
				t.Fatalf("Windows: %v %v", ws, err)
			}
			w := ws[0]
			if w.Generation != gen || w.Anchor == nil || w.Problem != "" || w.Through < live || w.Sealed {
				t.Fatalf("window %+v: want generation %s anchored, through >= %d, not sealed", w, gen, live)
			}
			segs := e.stored(gen)
			e.checkExact(segs, w.From+1, live)
			leases := map[int64]int64{}
			for _, s := range segs {
				for _, l := range s.Leases {
					leases[l.ID] = l.TTL
				}
			}
			var ttls []int64
			for _, ttl := range leases {
				ttls = append(ttls, ttl)
			}
			if len(leases) != 2 {
				t.Fatalf("leases recorded %v: want the two leases used", leases)
			}
			for _, ttl := range ttls {
				if ttl != 600 && ttl != 60 && ttl != -1 {
					t.Errorf("lease TTL %d: want the granted 600 or 60 (or -1 when gone)", ttl)
				}
			}
			if gaps := e.gaps(); len(gaps) > 0 {
				t.Errorf("gaps %v: want none", gaps)
			}
		})
	}
}

func TestCaptureIdleMarkersAdvance(t *testing.T) {
	e := newEnv(t, nil)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	first := e.last()
	e.waitFor("the recovery point to advance while idle", 30*time.Second, func() bool {
		s := e.last()
		return s.RecoveryPoint.After(first.RecoveryPoint.Add(300*time.Millisecond)) && s.Revision == first.Revision
	})
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	byGen, _, err := e.repo.ListProgress(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ms := byGen[first.Generation]
	if len(ms) != 1 {
		t.Fatalf("markers %v: want only the newest kept", ms)
	}
	if ms[0].Through != first.Revision || !ms[0].At.After(first.RecoveryPoint) {
		t.Errorf("marker %+v: want through %d at a time after %s", ms[0], first.Revision, first.RecoveryPoint)
	}
	if e.stats.Segments.Load() != 0 {
		t.Errorf("%d segments stored on an idle cluster", e.stats.Segments.Load())
	}
}

func TestCaptureResumesAfterCut(t *testing.T) {
	e := newEnv(t, nil)
	// Each connection is reset after 256 KiB; rounds of 100 KiB of
	// writes cut the watch mid-stream several times, and each resumed
	// stream has less than a connection's worth to catch up.
	px := etcdtest.NewProxy(t, e.etcd.Members[0].ClientURL, etcdtest.ProxyOptions{CutAfter: 256 << 10})
	e.start([]string{px.URL}, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	var live int64
	for round := range 8 {
		for i := range 100 {
			if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/k/%d", i%40), strings.Repeat("x", 1000+round)); err != nil {
				t.Fatal(err)
			}
		}
		live = e.waitCaught()
	}
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if px.Cuts() == 0 || e.stats.Reconnects.Load() == 0 {
		t.Fatalf("cuts %d, reconnects %d: want the watch cut and resumed", px.Cuts(), e.stats.Reconnects.Load())
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Fatalf("gaps %v after cuts: want none", gaps)
	}
	segs := e.stored(gen)
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
}

// gatedListener refuses connections while closed: a member unreachable.
type gatedListener struct {
	net.Listener
	open atomic.Bool
}

func (l *gatedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil || l.open.Load() {
			return c, err
		}
		c.Close()
	}
}

func TestCaptureCompactedWhileDisconnected(t *testing.T) {
	e := newEnv(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl := &gatedListener{Listener: ln}
	gl.open.Store(true)
	px := etcdtest.NewProxy(t, e.etcd.Members[0].ClientURL, etcdtest.ProxyOptions{Listener: gl, CutAfter: 256 << 10})
	e.start([]string{px.URL}, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	gl.open.Store(false)
	// Enough bytes through the watch to cut its connection; reconnects
	// are refused while the gate is closed.
	for i := 0; px.Cuts() == 0; i++ {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/k/%d", i%10), strings.Repeat("y", 4000)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/after/%d", i), "z"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cli.Compact(t.Context(), e.liveRev()); err != nil {
		t.Fatal(err)
	}
	gl.open.Store(true)
	e.waitFor("a sealed generation and a new one", 60*time.Second, func() bool {
		s := e.last()
		return s.Generation != "" && s.Generation != gen && s.Running
	})
	if got := e.gaps(); len(got) != 1 || got[0] != GapCompacted {
		t.Fatalf("gaps %v: want [%s]", got, GapCompacted)
	}
	if _, err := e.cli.Put(t.Context(), "/new/gen", "v"); err != nil {
		t.Fatal(err)
	}
	live := e.waitCaught()
	newGen := e.last().Generation
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.repo.List(t.Context())
	ws, err := e.repo.Windows(t.Context(), l)
	if err != nil || len(ws) != 2 {
		t.Fatalf("windows %v %v: want 2", ws, err)
	}
	if ws[0].Generation != gen || !ws[0].Sealed || ws[0].SealReason != string(GapCompacted) {
		t.Errorf("old window %+v: want %s sealed as compacted", ws[0], gen)
	}
	if ws[1].Generation != newGen || ws[1].Sealed || ws[1].Through < live {
		t.Errorf("new window %+v: want %s open through %d", ws[1], newGen, live)
	}
	segs := e.stored(newGen)
	e.checkExact(segs, ws[1].From+1, live)
}

func TestCaptureRestartContinuesChain(t *testing.T) {
	e := newEnv(t, nil)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	workload(t, e.cli, 10)
	first := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	n1, _, _ := e.repo.ListSegments(t.Context(), gen)
	// Written while no capture runs: the next run reads them from etcd.
	workload(t, e.cli, 10)
	e.token.Add(1)
	e.start(nil, nil)
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if got := e.last().Generation; got != gen {
		t.Fatalf("generation %s after restart: want %s continued", got, gen)
	}
	segs := e.stored(gen)
	if len(segs) <= len(n1) || segs[len(n1)].First != first+1 {
		t.Fatalf("segment after restart starts at %d: want %d", segs[len(n1)].First, first+1)
	}
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
}

// racingStore stores a foreign object at the first segment key it is
// asked to write, just before the capture does: a second writer.
type racingStore struct {
	uploader.Store
	raced atomic.Bool
}

func (s *racingStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/changes/") && s.raced.CompareAndSwap(false, true) {
		if _, err := s.Store.Put(ctx, key, bytes.NewReader([]byte("another writer")), opts); err != nil {
			return uploader.ObjectInfo{}, err
		}
	}
	return s.Store.Put(ctx, key, r, opts)
}

func TestCaptureSecondWriterDetected(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, &racingStore{Store: d})
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	if _, err := e.cli.Put(t.Context(), "/a", "1"); err != nil {
		t.Fatal(err)
	}
	e.waitFor("a new generation after the second writer", 60*time.Second, func() bool {
		s := e.last()
		return s.Generation != gen && s.Running
	})
	if got := e.gaps(); len(got) != 1 || got[0] != GapBrokenChain {
		t.Fatalf("gaps %v: want [%s]", got, GapBrokenChain)
	}
	if _, err := e.cli.Put(t.Context(), "/b", "2"); err != nil {
		t.Fatal(err)
	}
	e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	byGen, _, _ := e.repo.ListProgress(t.Context())
	var sealed bool
	for _, m := range byGen[gen] {
		sealed = sealed || m.Sealed
	}
	if !sealed {
		t.Errorf("generation %s not sealed: markers %v", gen, byGen[gen])
	}
}

// watchedStore counts the puts made after the job was told the lock is
// lost (the job writes from one goroutine, so such a put was made
// knowing it).
type watchedStore struct {
	uploader.Store
	lostSeen *atomic.Bool
	after    atomic.Int64
}

func (s *watchedStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if s.lostSeen.Load() {
		s.after.Add(1)
	}
	return s.Store.Put(ctx, key, r, opts)
}

func TestCaptureLockLostStopsWriting(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := &watchedStore{Store: d}
	e := newEnv(t, ws)
	ws.lostSeen = &e.lostSeen
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	if _, err := e.cli.Put(t.Context(), "/a", "1"); err != nil {
		t.Fatal(err)
	}
	e.lost.Store(true)
	if _, err := e.cli.Put(t.Context(), "/b", "2"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-e.done:
		e.cancel()
		e.cancel = nil
		if !errors.Is(err, ErrLockLost) {
			t.Fatalf("Run: %v, want ErrLockLost", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after the lock was lost")
	}
	// A lost lock is no gap: the generation goes on under the next
	// leader, so nothing may count or alert one (LifeboatCaptureGap).
	if s := e.last(); s.Running || s.Gap != "" || !errors.Is(s.Err, ErrLockLost) {
		t.Errorf("last status %+v: want stopped, no gap, Err ErrLockLost", s)
	}
	if n := ws.after.Load(); n != 0 {
		t.Errorf("%d objects stored after the job was told the lock is lost: want none", n)
	}
	byGen, _, _ := e.repo.ListProgress(t.Context())
	for _, ms := range byGen {
		for _, m := range ms {
			if m.Sealed {
				t.Errorf("sealed marker %s: a lost lock writes nothing", m.Object.Key)
			}
		}
	}
}

// gatedStore blocks segment puts until released: a slow store.
type gatedStore struct {
	uploader.Store
	release chan struct{}
}

func (s *gatedStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/changes/") {
		select {
		case <-s.release:
		case <-ctx.Done():
			return uploader.ObjectInfo{}, ctx.Err()
		}
	}
	return s.Store.Put(ctx, key, r, opts)
}

func TestCaptureBufferBounded(t *testing.T) {
	d, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	gs := &gatedStore{Store: d, release: make(chan struct{})}
	e := newEnv(t, gs)
	const maxBuf = 256 << 10
	e.start(nil, func(j *Job) { j.MaxBufferBytes, j.MaxSegmentBytes = maxBuf, 64<<10 })
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	// A burst of 8 MiB, 32 times the bound, while the store hangs.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 256 {
				if _, err := e.cli.Put(context.Background(), fmt.Sprintf("/burst/%d/%d", w, i), strings.Repeat("b", 4<<10)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	e.waitFor("the buffer to fill", 30*time.Second, func() bool { return e.stats.BufferedBytes.Load() >= maxBuf })
	// The reader holds up to one response past the bound (etcd fragments
	// responses at its max request bytes, 1.5 MiB, + 512 KiB of gRPC
	// overhead), plus one revision.
	const bound = maxBuf + 2<<20 + 64<<10
	if peak := e.stats.PeakBufferedBytes.Load(); peak > bound {
		t.Fatalf("peak buffered %d bytes: want at most %d (bound %d + one response)", peak, bound, maxBuf)
	}
	close(gs.release)
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if peak := e.stats.PeakBufferedBytes.Load(); peak > bound {
		t.Fatalf("peak buffered %d bytes while catching up: want at most %d", peak, bound)
	}
	t.Logf("peak buffered %d bytes for a burst of 8 MiB (bound %d)", e.stats.PeakBufferedBytes.Load(), maxBuf)
	segs := e.stored(gen)
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
}

// TestCaptureAuthReconnect: with etcd auth on, the watch reopened after
// a cut carries the session's token. (A stale token, which a simple
// token becomes only by expiring after minutes idle, cannot be provoked
// here: the renewal on a refused create is not covered by a test.)
func TestCaptureAuthReconnect(t *testing.T) {
	e := newEnvOpts(t, nil, etcdtest.Options{Auth: true})
	px := etcdtest.NewProxy(t, e.etcd.Members[0].ClientURL, etcdtest.ProxyOptions{CutAfter: 128 << 10})
	e.start([]string{px.URL}, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	// Rounds of 40 KiB, each captured before the next, so that a
	// resumed stream has less than a connection's worth to catch up.
	var live int64
	for round := 0; round < 3 || px.Cuts() == 0; round++ {
		for i := range 20 {
			if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/k/%d", i), strings.Repeat("t", 2000)); err != nil {
				t.Fatal(err)
			}
		}
		live = e.waitCaught()
	}
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Fatalf("gaps %v: want none", gaps)
	}
	segs := e.stored(gen)
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
}

func TestCaptureStoreFailureRetried(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	srv.CreateBucket(t, "capture-faults", false)
	px := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: "capture-faults", Prefix: "team", Endpoint: px.URL, Region: srv.Region, PathStyle: true, MaxAttempts: 1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	var failed atomic.Int64
	px.SetFault(func(r *http.Request, _ int) s3test.Fault {
		if r.Method == http.MethodPut && strings.Contains(r.URL.Path, "/changes/") && failed.Add(1) <= 4 {
			return s3test.Status(503)
		}
		return s3test.None
	})
	for i := range 50 {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/f/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	var sawErr bool
	e.mu.Lock()
	for _, s := range e.statuses {
		sawErr = sawErr || s.Err != nil
	}
	e.mu.Unlock()
	if failed.Load() < 4 || !sawErr {
		t.Fatalf("%d segment puts failed, an error reported: %v: want 4 failures reported", min(failed.Load(), 4), sawErr)
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Fatalf("gaps %v: want none", gaps)
	}
	segs := e.stored(gen)
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
}

// switchProxy forwards TCP connections to a target that the test can
// switch: the endpoint starts answering for another cluster, as when
// DNS or a load balancer moves to a restored cluster.
type switchProxy struct {
	ln     net.Listener
	target atomic.Value
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newSwitchProxy(t *testing.T, target string) *switchProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &switchProxy{ln: ln}
	p.target.Store(target)
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", p.target.Load().(string))
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(s, c); s.Close() })
			p.wg.Go(func() { io.Copy(c, s); c.Close() })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.cut()
		p.wg.Wait()
	})
	return p
}

func (p *switchProxy) URL() string { return "http://" + p.ln.Addr().String() }

// cut closes every forwarded connection.
func (p *switchProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func TestCaptureClusterIDChange(t *testing.T) {
	e := newEnv(t, nil)
	other := etcdtest.Start(t, etcdtest.Options{})
	oc := other.Client(t)
	for i := range 5 {
		if _, err := oc.Put(t.Context(), fmt.Sprintf("/other/%d", i), "o"); err != nil {
			t.Fatal(err)
		}
	}
	host := func(u string) string { return strings.TrimPrefix(u, "http://") }
	sp := newSwitchProxy(t, host(e.etcd.Members[0].ClientURL))
	lg, _ := jobtest.Logger(t)
	// The other cluster is not of the store's lineage: its snapshot is
	// refused unless adopted, as an operator who moved the agent to a
	// rebuilt cluster on purpose would (issue 28).
	adopt := clusterIDHex(t, oc)
	e.start([]string{sp.URL()}, func(j *Job) {
		j.Snapshot = func(ctx context.Context) (*repository.Manifest, error) {
			return backup.Run(ctx, backup.Job{Etcd: e.config([]string{sp.URL()}), SpoolDir: e.spool, Backups: e.repo, Version: "test", AdoptCluster: adopt}, lg)
		}
	})
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	if _, err := e.cli.Put(t.Context(), "/a", "1"); err != nil {
		t.Fatal(err)
	}
	e.waitCaught()
	sp.target.Store(host(other.Members[0].ClientURL))
	sp.cut()
	e.waitFor("a new generation on the other cluster", 60*time.Second, func() bool {
		s := e.last()
		return s.Generation != gen && s.Generation != "" && s.Running
	})
	if got := e.gaps(); len(got) != 1 || got[0] != GapClusterID {
		t.Fatalf("gaps %v: want [%s]", got, GapClusterID)
	}
	r, err := oc.Put(t.Context(), "/other/after", "o")
	if err != nil {
		t.Fatal(err)
	}
	e.waitFor("the other cluster's write captured", 30*time.Second, func() bool { return e.last().Revision >= r.Header.Revision })
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.repo.List(t.Context())
	ws, err := e.repo.Windows(t.Context(), l)
	if err != nil || len(ws) != 2 {
		t.Fatalf("windows %v %v: want 2", ws, err)
	}
	if ws[0].Generation != gen || !ws[0].Sealed || ws[0].SealReason != string(GapClusterID) {
		t.Errorf("old window %+v: want %s sealed as cluster_id", ws[0], gen)
	}
	if ws[1].Anchor == nil || ws[1].Anchor.EtcdClusterID == ws[0].Anchor.EtcdClusterID {
		t.Errorf("new generation's anchor %+v: want a snapshot of the other cluster", ws[1].Anchor)
	}
}

// TestCaptureRestoredInPlace: the cluster restored in place from an older
// snapshot, keeping its cluster ID (same name, peer URL and token: a
// plain `etcdutl snapshot restore`, kubeadm's default), is below the
// captured revision. etcd sends no progress to a watch that starts in
// its future, so the watch's created response is the one signal: the
// generation is sealed as revision_backwards and a new one starts on the
// restored cluster. (Before, capture waited without a word until the
// restored cluster passed the captured revision, then appended its
// history to the old generation's.)
func TestCaptureRestoredInPlace(t *testing.T) {
	e := newEnv(t, nil)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	before, err := e.cli.Get(t.Context(), "/seed")
	if err != nil {
		t.Fatal(err)
	}
	snap := e.etcd.SaveSnapshot(t)
	for i := range 20 {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/lost/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	captured := e.waitCaught()
	e.etcd.RestoreInPlace(t, snap)
	after, err := e.cli.Get(t.Context(), "/seed")
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.ClusterId != before.Header.ClusterId || after.Header.Revision >= captured {
		t.Fatalf("restored cluster %x at revision %d: want the same ID %x below the captured %d", after.Header.ClusterId, after.Header.Revision, before.Header.ClusterId, captured)
	}
	e.waitFor("a new generation on the restored cluster", 60*time.Second, func() bool {
		s := e.last()
		return s.Generation != gen && s.Generation != "" && s.Running
	})
	if got := e.gaps(); len(got) != 1 || got[0] != GapRevisionBackwards {
		t.Fatalf("gaps %v: want [%s]", got, GapRevisionBackwards)
	}
	if _, err := e.cli.Put(t.Context(), "/restored/after", "r"); err != nil {
		t.Fatal(err)
	}
	live := e.waitCaught()
	newGen := e.last().Generation
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	l, _ := e.repo.List(t.Context())
	ws, err := e.repo.Windows(t.Context(), l)
	if err != nil || len(ws) != 2 {
		t.Fatalf("windows %v %v: want 2", ws, err)
	}
	if ws[0].Generation != gen || !ws[0].Sealed || ws[0].SealReason != string(GapRevisionBackwards) || ws[0].Through != captured {
		t.Errorf("old window %+v: want %s sealed as revision_backwards through %d", ws[0], gen, captured)
	}
	if ws[1].Generation != newGen || ws[1].Sealed || ws[1].Through < live || ws[1].From >= captured {
		t.Errorf("new window %+v: want %s open from the restored revision through %d", ws[1], newGen, live)
	}
}

// lostReplyStore stores the first segment and the first progress
// marker after it, then fails their puts: the object landed, the reply
// was lost (as when the dir store's sync or stat fails after the rename).
type lostReplyStore struct {
	uploader.Store
	armed                   atomic.Bool
	segFaults, markerFaults atomic.Int64
}

func (s *lostReplyStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	o, err := s.Store.Put(ctx, key, r, opts)
	if err != nil || !s.armed.Load() {
		return o, err
	}
	switch {
	case strings.Contains(key, "/changes/") && s.segFaults.Add(1) == 1,
		strings.Contains(key, "/progress/") && s.segFaults.Load() > 0 && s.markerFaults.Add(1) == 1:
		return uploader.ObjectInfo{}, fmt.Errorf("put %s: sync: input/output error (injected after the object was stored)", key)
	}
	return o, nil
}

// TestCaptureLostPutReplyAdopted: a segment and a progress marker whose
// puts were stored but whose replies were lost (the S3 confirm HEAD
// fails) are found at the retry as this writer's own and adopted: no
// gap, the chain goes on, and the landed marker is deleted once a newer
// one supersedes it. (Before, the retried segment met 412, the
// generation was sealed as broken_chain and a full snapshot followed,
// leaving a hole.)
func TestCaptureLostPutReplyAdopted(t *testing.T) {
	for _, store := range []string{"dir", "s3"} {
		t.Run(store, func(t *testing.T) { testLostPutReply(t, store) })
	}
}

func testLostPutReply(t *testing.T, store string) {
	var st uploader.Store
	var segFaults, markerFaults *atomic.Int64
	var px *s3test.Proxy
	var ls *lostReplyStore
	if store == "dir" {
		d, err := uploader.NewDir(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		ls = &lostReplyStore{Store: d}
		st, segFaults, markerFaults = ls, &ls.segFaults, &ls.markerFaults
	} else {
		srv := s3test.Start(t)
		srv.Env(t)
		srv.CreateBucket(t, "capture-lost", false)
		px = s3test.NewProxy(t, srv.Endpoint)
		s3, err := uploader.NewS3(t.Context(), uploader.S3Config{
			Bucket: "capture-lost", Prefix: "team", Endpoint: px.URL, Region: srv.Region, PathStyle: true, MaxAttempts: 1,
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		st, segFaults, markerFaults = s3, new(atomic.Int64), new(atomic.Int64)
	}
	e := newEnv(t, st)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	if px != nil {
		px.SetFault(func(r *http.Request, _ int) s3test.Fault {
			if r.Method != http.MethodHead || r.Header.Get("If-Match") == "" && r.URL.Query().Get("versionId") == "" {
				return s3test.None // only the confirm HEAD of a put
			}
			switch {
			case strings.Contains(r.URL.Path, "/changes/") && segFaults.Add(1) == 1,
				strings.Contains(r.URL.Path, "/progress/") && segFaults.Load() > 0 && markerFaults.Add(1) == 1:
				return s3test.Status(500)
			}
			return s3test.None
		})
	} else {
		ls.armed.Store(true)
	}
	for i := range 20 {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/l/%d", i), "v"); err != nil {
			t.Fatal(err)
		}
	}
	live := e.waitCaught()
	// Idle markers supersede the one whose reply was lost.
	at := e.last().RecoveryPoint
	e.waitFor("an idle marker", 30*time.Second, func() bool { return e.last().RecoveryPoint.After(at) })
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if segFaults.Load() == 0 || markerFaults.Load() == 0 {
		t.Fatalf("%d segment and %d marker confirmations failed: want both", segFaults.Load(), markerFaults.Load())
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Fatalf("gaps %v: want none", gaps)
	}
	segs := e.stored(gen)
	e.checkExact(segs, segs[0].SnapshotRevision+1, live)
	byGen, _, err := e.repo.ListProgress(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if ms := byGen[gen]; len(ms) != 1 {
		t.Errorf("markers %v: want only the newest kept", ms)
	}
}

// clusterIDHex is the etcd cluster ID cli's cluster answers with, as
// manifests and --adopt-cluster spell it.
func clusterIDHex(t *testing.T, cli *clientv3.Client) string {
	t.Helper()
	r, err := cli.Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", r.Header.ClusterId)
}
