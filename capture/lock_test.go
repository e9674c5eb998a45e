package capture

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCaptureCompactsUnderObjectLock: capture and its compaction on a
// real bucket with COMPLIANCE Object Lock, in compressed time, for
// several lock periods, with locks shorter than the run: segments and
// markers are locked as they are written, compaction never fails because
// a replaced segment is still locked (it waits), the window's objects
// level off as without locks, and no object was ever deleted while its
// retention was on (the store is asked before each delete).
func TestCaptureCompactsUnderObjectLock(t *testing.T) {
	srv := s3test.Start(t)
	s3, _ := jobtest.NewS3Store(t, srv, true)
	st := &lockWatch{S3: s3}
	e := newEnv(t, st)
	compact := repository.CompactPolicy{Levels: []time.Duration{time.Second, 3 * time.Second}, Settle: 200 * time.Millisecond, Grace: 300 * time.Millisecond}
	e.repo.Lock = repository.LockPolicy{
		Retention:  uploader.Retention{Mode: uploader.LockCompliance, For: 4 * time.Second},
		Compaction: compact, Margin: 500 * time.Millisecond,
	}
	e.start(nil, func(j *Job) { j.Compact = compact })
	e.waitFor("a generation", 30*time.Second, func() bool { return e.last().Generation != "" })
	end := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(end); i++ {
		if _, err := e.cli.Put(t.Context(), fmt.Sprintf("/registry/events/ns/e%d", i%50), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond) // a steady writer, not a wait for an effect
	}
	live := e.waitCaught()
	written := e.stats.Segments.Load()
	e.waitFor("compaction and the replaced segments' deletion once unlocked", 60*time.Second, func() bool {
		w := e.windows()[0]
		return len(w.Superseded) == 0 && e.stats.Compacted.Load() > 0 && len(w.Segments) < int(written)/3
	})
	w := e.windows()[0]
	for _, s := range w.Segments {
		info, err := st.Stat(t.Context(), s.Object.Key)
		if err != nil {
			t.Fatal(err)
		}
		if info.LockMode != uploader.LockCompliance {
			t.Errorf("segment %s on the path: lock mode %q, want COMPLIANCE", s.Object.Key, info.LockMode)
		}
	}
	if err := e.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if n := e.stats.CompactErrors.Load(); n != 0 {
		t.Errorf("%d compaction passes failed, want none (a lock is never an error)", n)
	}
	w = e.windows()[0]
	if w.Problem != "" || w.Through < live {
		t.Fatalf("window through %d, problem %q; want through >= %d", w.Through, w.Problem, live)
	}
	e.checkExact(e.pathSegments(w), w.From+1, live)
	if st.n == 0 || len(st.early) > 0 {
		t.Errorf("%d deletes, of objects still locked: %v; want some, none locked", st.n, st.early)
	}
	t.Logf("%d segments written, %d objects left (%d compacted, %d replaced deleted)", written, len(w.Segments), e.stats.Compacted.Load(), e.stats.Replaced.Load())
}

// lockWatch is the real S3 store, watched: before each Delete it asks
// the store whether the object is still locked, and records it if so.
type lockWatch struct {
	*uploader.S3
	mu    sync.Mutex
	early []string
	n     int
}

func (w *lockWatch) Delete(ctx context.Context, key string) error {
	info, err := w.S3.Stat(ctx, key)
	w.mu.Lock()
	w.n++
	if err == nil && info.Locked(time.Now()) {
		w.early = append(w.early, fmt.Sprintf("%s (locked until %s)", key, info.RetainUntil))
	}
	w.mu.Unlock()
	return w.S3.Delete(ctx, key)
}
