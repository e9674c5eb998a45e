package capture

import (
	"fmt"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
)

// pathSegments reads the segments of a window's path.
func (e *env) pathSegments(w repository.Window) []*repository.Segment {
	e.t.Helper()
	var out []*repository.Segment
	for _, si := range w.Segments {
		s, _, err := e.repo.ReadSegment(e.t.Context(), si, nil)
		if err != nil {
			e.t.Fatalf("ReadSegment %s: %v", si.Object.Key, err)
		}
		out = append(out, s)
	}
	return out
}

// startRolling starts capture with a rollover channel (and tune), waits
// for its first generation, and returns the channel and that generation.
func (e *env) startRolling(tune func(*Job)) (chan *repository.Manifest, string) {
	e.t.Helper()
	roll := make(chan *repository.Manifest, 1)
	e.start(nil, func(j *Job) {
		j.Rollover = roll
		if tune != nil {
			tune(j)
		}
	})
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	return roll, e.last().Generation
}

// scheduled takes a backup as the daemon's snapshot schedule would.
func (e *env) scheduled() *repository.Manifest {
	e.t.Helper()
	lg, _ := jobtest.Logger(e.t)
	m, err := e.snapshotFunc(lg)(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return m
}

func (e *env) windows() []repository.Window {
	e.t.Helper()
	l, err := e.repo.List(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	ws, err := e.repo.Windows(e.t.Context(), l)
	if err != nil {
		e.t.Fatal(err)
	}
	return ws
}

// TestCaptureRollover: a scheduled snapshot committed while capture
// runs ends the generation ("rollover", not a gap) once its changes
// reach the snapshot's revision, and the next starts at that snapshot:
// the two windows overlap, every revision is in one of them, exactly as
// etcd's history has it, and the old one can be pruned whole.
func TestCaptureRollover(t *testing.T) {
	e := newEnv(t, nil)
	roll, first := e.startRolling(nil)
	workload(t, e.cli, 20)
	m := e.scheduled()
	workload(t, e.cli, 20)
	roll <- m
	e.waitFor("the rollover", 30*time.Second, func() bool { return e.last().Generation == m.ID })
	workload(t, e.cli, 10)
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ws := e.windows()
	if len(ws) != 2 {
		t.Fatalf("%d windows, want 2: %+v", len(ws), ws)
	}
	old, cur := ws[0], ws[1]
	if old.Generation != first || !old.Sealed || old.SealReason != string(SealRollover) || old.Problem != "" || old.Through < m.Revision {
		t.Fatalf("old window %s: sealed %v (%s), through %d, problem %q; want sealed for rollover through >= %d", old.Generation, old.Sealed, old.SealReason, old.Through, old.Problem, m.Revision)
	}
	if cur.Generation != m.ID || cur.From != m.Revision || cur.Problem != "" || cur.Sealed || cur.Through < live {
		t.Fatalf("new window %s: %d-%d sealed %v problem %q; want %d-%d", cur.Generation, cur.From, cur.Through, cur.Sealed, cur.Problem, m.Revision, live)
	}
	e.checkExact(e.stored(old.Generation), old.From+1, m.Revision)
	e.checkExact(e.stored(cur.Generation), m.Revision+1, live)
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Errorf("gaps %v: a rollover is none", gaps)
	}
	if n := e.stats.Rollovers.Load(); n != 1 {
		t.Errorf("%d rollovers counted, want 1", n)
	}
}

// TestCaptureRolloverAfter: a generation younger than RolloverAfter does
// not roll over to a scheduled snapshot (it keeps capturing).
func TestCaptureRolloverAfter(t *testing.T) {
	e := newEnv(t, nil)
	roll, gen := e.startRolling(func(j *Job) { j.RolloverAfter = time.Hour })
	workload(t, e.cli, 5)
	m := e.scheduled()
	roll <- m
	workload(t, e.cli, 5)
	e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ws := e.windows(); len(ws) != 1 || ws[0].Generation != gen || ws[0].Sealed {
		t.Fatalf("windows %+v: want generation %s alone, not sealed", ws, gen)
	}
}

// TestCaptureCompacts: with compaction levels of 1 s and 3 s, a capture
// at 100 ms under a steady writer leaves a few dozen objects instead of
// one per interval, the window is the same revisions as etcd's history
// read through the compacted segments, the replaced segments are
// deleted after the grace, and verify --changes finds nothing wrong.
func TestCaptureCompacts(t *testing.T) {
	e := newEnv(t, nil)
	e.start(nil, func(j *Job) {
		j.Compact = repository.CompactPolicy{Levels: []time.Duration{time.Second, 3 * time.Second}, Settle: 200 * time.Millisecond, Grace: 300 * time.Millisecond}
	})
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	end := time.Now().Add(7 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/registry/events/ns/e%d", i%50), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a steady writer, not a wait for an effect
	}
	live := e.waitCaught()
	written := e.stats.Segments.Load()
	e.waitFor("compaction and the replaced segments' deletion", 30*time.Second, func() bool {
		w := e.windows()[0]
		return len(w.Superseded) == 0 && e.stats.Compacted.Load() > 0 && len(w.Segments) < int(written)/3
	})
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	w := e.windows()[0]
	if w.Problem != "" || w.Through < live {
		t.Fatalf("window through %d, problem %q; want through >= %d", w.Through, w.Problem, live)
	}
	e.checkExact(e.pathSegments(w), w.From+1, live)
	c, err := e.repo.VerifyChanges(t.Context(), w, nil)
	if err != nil || c.Problem != nil {
		t.Fatalf("verify --changes: %v, %v", c.Problem, err)
	}
	t.Logf("%d segments written, %d objects left (%d compacted, %d replaced deleted)", written, len(w.Segments), e.stats.Compacted.Load(), e.stats.Replaced.Load())
}

// TestCaptureRolloverCompacted: a scheduled snapshot whose revision etcd
// compacted before the snapshot was handed over (its upload outlasted
// etcd's history) is no rollover: the next generation could not watch
// from it. The generation goes on, without a gap.
func TestCaptureRolloverCompacted(t *testing.T) {
	e := newEnv(t, nil)
	roll, gen := e.startRolling(nil)
	workload(t, e.cli, 5)
	m := e.scheduled()
	workload(t, e.cli, 5)
	if _, err := e.cli.Compact(t.Context(), e.liveRev()); err != nil {
		t.Fatal(err)
	}
	roll <- m
	workload(t, e.cli, 5)
	live := e.waitCaught()
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	ws := e.windows()
	if len(ws) != 1 || ws[0].Generation != gen || ws[0].Sealed || ws[0].Problem != "" || ws[0].Through < live {
		t.Fatalf("windows %+v: want generation %s alone, through %d, not sealed", ws, gen, live)
	}
	if gaps := e.gaps(); len(gaps) > 0 {
		t.Errorf("gaps %v: want none", gaps)
	}
}
