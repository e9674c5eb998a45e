package capture

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestCaptureHigherStoredTokenStartsNewGeneration: the newest
// generation's marker has a fencing token above the job's (a capture
// without a lock, whose token is its start time in nanoseconds, then one
// with the lock, whose token is an election key's create revision; or
// etcd restored to an older revision). The job starts a new generation
// and captures instead of refusing to start with ErrLockLost forever.
func TestCaptureHigherStoredTokenStartsNewGeneration(t *testing.T) {
	e := newEnv(t, nil)
	e.token.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	old := e.last().Generation
	workload(t, e.cli, 5)
	e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	e.token.Store(42)
	e.start(nil, nil)
	e.waitFor("a new generation", 60*time.Second, func() bool {
		s := e.last()
		return s.Running && s.Generation != "" && s.Generation != old
	})
	workload(t, e.cli, 5)
	live := e.waitCaught()
	gen := e.last().Generation
	if err := e.stop(); err != nil {
		t.Fatalf("Run after the token went down: %v", err)
	}
	ws := e.windows()
	if n := len(ws); n != 2 || ws[0].Generation != old || ws[1].Generation != gen {
		t.Fatalf("windows %v: want %s then %s", ws, old, gen)
	}
	if w := ws[1]; w.Problem != "" || w.Through < live {
		t.Errorf("new window %+v: want through %d, no problem", w, live)
	}
	e.checkExact(e.stored(gen), ws[1].From+1, live)
}

// TestCaptureAnchorsOnCommittedBackup: a new generation starts on the
// store's newest committed backup, without a snapshot of its own, when
// etcd still holds the revisions after it and it is of this cluster;
// otherwise (compacted past it, another cluster's) the job takes its own.
func TestCaptureAnchorsOnCommittedBackup(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before func(t *testing.T, e *env) // after the backup, before capture starts
		other  bool                       // the backup is of another cluster
		adopt  bool
	}{
		{name: "in history", adopt: true},
		{name: "compacted", before: func(t *testing.T, e *env) {
			if _, err := e.cli.Compact(t.Context(), e.liveRev()); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "other cluster", other: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			lg, _ := jobtest.Logger(t)
			cfg := e.config(e.etcd.Endpoints())
			if tc.other {
				o := etcdtest.Start(t, etcdtest.Options{})
				if _, err := o.Client(t).Put(t.Context(), "/other", "o"); err != nil {
					t.Fatal(err)
				}
				cfg = snapshot.Config{Endpoints: o.Endpoints(), DialTimeout: 5 * time.Second}
			}
			m, err := backup.Run(t.Context(), backup.Job{Etcd: cfg, SpoolDir: e.spool, Backups: e.repo, Version: "test"}, lg)
			if err != nil {
				t.Fatal(err)
			}
			workload(t, e.cli, 5) // between the backup and capture's start
			if tc.before != nil {
				tc.before(t, e)
			}
			var snaps atomic.Int32
			e.start(nil, func(j *Job) {
				take := j.Snapshot
				if tc.other {
					// The store's lineage is the other cluster's: this
					// cluster's own snapshot is refused unless adopted
					// (issue 28), as after a rebuild.
					adopt := clusterIDHex(t, e.cli)
					take = func(ctx context.Context) (*repository.Manifest, error) {
						return backup.Run(ctx, backup.Job{Etcd: e.config(e.etcd.Endpoints()), SpoolDir: e.spool, Backups: e.repo, Version: "test", AdoptCluster: adopt}, lg)
					}
				}
				j.Snapshot = func(ctx context.Context) (*repository.Manifest, error) {
					snaps.Add(1)
					return take(ctx)
				}
			})
			e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Running && e.last().Generation != "" })
			workload(t, e.cli, 5)
			live := e.waitCaught()
			gen := e.last().Generation
			if err := e.stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}
			if got := gen == m.ID; got != tc.adopt {
				t.Errorf("generation %s on backup %s: %v, want %v", gen, m.ID, got, tc.adopt)
			}
			if got, want := snaps.Load(), int32(1); tc.adopt {
				if got != 0 {
					t.Errorf("%d snapshots taken: want none, the backup anchors", got)
				}
			} else if got != want {
				t.Errorf("%d snapshots taken: want %d", got, want)
			}
			if gaps := e.gaps(); len(gaps) > 0 {
				t.Errorf("gaps %v: want none", gaps)
			}
			ws := e.windows()
			w := ws[len(ws)-1]
			if w.Generation != gen || w.Problem != "" || w.Through < live {
				t.Fatalf("window %+v: want %s through %d", w, gen, live)
			}
			e.checkExact(e.stored(gen), w.From+1, live)
		})
	}
}

// TestCaptureBornWhileCompacting: the new generation's snapshot takes
// longer than etcd's compaction horizon (a large database over a slow
// link; kube-apiserver compacts every 5 minutes): the snapshot hook
// writes on and compacts the real etcd at its current revision before it
// returns. The generation starts without a gap and captures every
// revision after its snapshot, held while the snapshot was stored (past
// a small memory bound, in a spool file), instead of starting
// "compacted" and taking another snapshot, in a loop.
func TestCaptureBornWhileCompacting(t *testing.T) {
	e := newEnv(t, nil)
	lg, _ := jobtest.Logger(t)
	var snaps atomic.Int32
	e.start(nil, func(j *Job) {
		j.MaxBufferBytes, j.MaxSegmentBytes = 64<<10, 32<<10 // the held writes spill
		j.SpoolDir = t.TempDir()
		take := j.Snapshot
		j.Snapshot = func(ctx context.Context) (*repository.Manifest, error) {
			snaps.Add(1)
			m, err := take(ctx)
			if err != nil {
				return nil, err
			}
			for i := range 300 {
				if _, err := e.cli.Put(ctx, fmt.Sprintf("/registry/configmaps/c%d", i%30), strings.Repeat("x", 1000)); err != nil {
					return nil, err
				}
			}
			if _, err := e.cli.Compact(ctx, e.liveRev()); err != nil {
				return nil, err
			}
			lg.Info("test: compacted during the snapshot", "backup_id", m.ID)
			return m, nil
		}
	})
	e.waitFor("a generation", 60*time.Second, func() bool { return e.last().Running && e.last().Generation != "" })
	gen := e.last().Generation
	workload(t, e.cli, 5)
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Fatalf("gaps %v: want none", gaps)
	}
	if n := snaps.Load(); n != 1 {
		t.Errorf("%d snapshots: want 1", n)
	}
	if n := e.stats.SpilledBytes.Load(); n == 0 {
		t.Errorf("nothing spilled: want the held writes beyond %d bytes in the spool file", 64<<10)
	}
	ws := e.windows()
	w := ws[len(ws)-1]
	if len(ws) != 1 || w.Generation != gen || w.Problem != "" || w.Through < live {
		t.Fatalf("windows %v: want one, %s through %d", ws, gen, live)
	}
	segs := e.stored(gen)
	var got []repository.Revision
	for _, s := range segs {
		got = append(got, s.Revisions...)
	}
	if len(got) == 0 || got[0].Revision != w.From+1 || got[len(got)-1].Revision < live {
		t.Fatalf("captured %d revisions: want dense from %d through %d", len(got), w.From+1, live)
	}
	for i, r := range got {
		if r.Revision != w.From+1+int64(i) {
			t.Fatalf("revision %d at index %d: want dense from %d", r.Revision, i, w.From+1)
		}
	}
}

// TestCaptureForkDetected: an old leader's in-flight segment put lands
// after the new leader resumed: two level-0 segments start at the
// resumed revision + 1, and the window ends before them. The new writer
// lists its generation's head and seals it as broken_chain instead of
// advancing its revision and recovery point over a window that ends.
func TestCaptureForkDetected(t *testing.T) {
	e := newEnv(t, nil)
	e.start(nil, nil)
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	gen := e.last().Generation
	workload(t, e.cli, 5)
	d := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	e.token.Add(1) // the next leader
	e.start(nil, nil)
	e.waitFor("the generation continued", 30*time.Second, func() bool { return e.last().Running && e.last().Generation == gen })
	workload(t, e.cli, 5)
	e.waitCaught()
	// The old leader's late put: the revision after d, under its token.
	segs, _, err := e.repo.ListSegments(t.Context(), gen)
	if err != nil {
		t.Fatal(err)
	}
	var next *repository.SegmentInfo
	for i := range segs {
		if segs[i].First == d+1 {
			next = &segs[i]
		}
	}
	if next == nil || next.Last == next.First {
		t.Fatalf("segments %v: want one from %d with more than one revision", segs, d+1)
	}
	s, _, err := e.repo.ReadSegment(t.Context(), *next, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Revisions = s.Revisions[:1]
	s.Last, s.CapturedThrough, s.Token = s.First, s.First, e.token.Load()-1
	var leases []repository.Lease
	for _, l := range s.Leases {
		if l.Revision <= s.First {
			leases = append(leases, l)
		}
	}
	s.Leases = leases
	if _, _, err := e.repo.PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"}); err != nil {
		t.Fatal(err)
	}
	if w := e.windows()[0]; w.Problem == "" {
		t.Fatalf("window %+v: want the fork as its problem", w)
	}
	e.waitFor("the fork sealed and a new generation", 30*time.Second, func() bool {
		st := e.last()
		return st.Running && st.Generation != "" && st.Generation != gen
	})
	if gaps := e.gaps(); len(gaps) != 1 || gaps[0] != GapBrokenChain {
		t.Errorf("gaps %v: want [%s]", gaps, GapBrokenChain)
	}
	workload(t, e.cli, 2)
	e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatal(err)
	}
	if ws := e.windows(); len(ws) != 2 || ws[0].Generation != gen || ws[1].Problem != "" {
		t.Errorf("windows %v: want %s, then a new sound one", ws, gen)
	}
	byGen, _, err := e.repo.ListProgress(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var reason string
	for _, m := range byGen[gen] {
		if m.Sealed {
			p, err := e.repo.ReadProgress(t.Context(), m)
			if err != nil {
				t.Fatal(err)
			}
			reason = p.SealReason
		}
	}
	if reason != string(GapBrokenChain) {
		t.Errorf("generation %s sealed %q: want %s", gen, reason, GapBrokenChain)
	}
}
