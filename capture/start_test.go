package capture

import (
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// windows lists the store's windows.
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
