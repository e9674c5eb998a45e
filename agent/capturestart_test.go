package agent

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// realCapture is the agent's capture job as cmd/lifeboat wires it
// (capture.Run on its own session), at a 100ms interval.
func (f *fixture) realCapture(t *testing.T) CaptureFunc {
	lg, _ := testLogger(t)
	return func(ctx context.Context, h CaptureHooks) error {
		s, err := snapshot.Dial(ctx, f.etcdConfig(), lg)
		if err != nil {
			return err
		}
		defer s.Close()
		return capture.Run(ctx, capture.Job{
			Session: s, Repo: f.backups, Encoding: repository.Encoding{Compression: "zstd"},
			Interval: 100 * time.Millisecond, Token: h.Token, Snapshot: h.Snapshot, Report: h.Report,
		}, lg)
	}
}

// TestCaptureRunAtStartNoGap: an agent with --run-at-start and
// --capture while writes go on. Capture anchors on the start snapshot
// instead of taking its own after it (which left every revision between
// the two outside every window, and, in the same second at the same
// revision, cost a "backup exists" and 10 s): every revision after the
// first committed snapshot is inside a window.
func TestCaptureRunAtStartNoGap(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 50)
	lg, _ := testLogger(t)
	cli := f.etcd.Client(t)
	var last atomic.Int64
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				done <- nil
				return
			default:
			}
			r, err := cli.Put(context.Background(), fmt.Sprintf("/registry/events/e%d", i%20), fmt.Sprint(i))
			if err != nil {
				done <- err
				return
			}
			last.Store(r.Header.Revision)
			time.Sleep(5 * time.Millisecond) // a steady writer, not a wait
		}
	}()
	waitFor(t, "the writer", 10*time.Second, func() bool { return last.Load() > 0 })
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 1h"}
	cfg.RunAtStart = true
	cfg.Capture = f.realCapture(t)
	a := start(t, cfg, lg)
	waitFor(t, "capture to run", time.Minute, func() bool {
		c := getStatus(t, a.url).Capture
		return c != nil && c.Running && c.Revision > 0
	})
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	end := last.Load()
	waitFor(t, fmt.Sprintf("capture through revision %d", end), time.Minute, func() bool {
		return getStatus(t, a.url).Capture.Revision >= end
	})
	if err, _ := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	l, err := f.backups.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(l.Backups); n != 1 {
		var ids []string
		for _, e := range l.Backups {
			ids = append(ids, e.Manifest.ID)
		}
		t.Errorf("backups %v: want only the start snapshot, capture anchored on it", ids)
	}
	first := l.Backups[len(l.Backups)-1].Manifest
	ws, err := f.backups.Windows(t.Context(), l)
	if err != nil {
		t.Fatal(err)
	}
	for r := first.Revision; r <= end; r++ {
		in := false
		for i := range ws {
			in = in || ws[i].Contains(r)
		}
		if !in {
			t.Fatalf("revision %d (after the first snapshot %s, through %d) is in no window %v", r, first.ID, end, ws)
		}
	}
}

// TestCaptureSnapshotAdoptsSameID: capture asks for a snapshot while a
// committed backup of the same revision and second is stored (the clock
// stands still, nothing is written): it adopts that backup instead of
// failing with "backup exists" and waiting for the next second.
func TestCaptureSnapshotAdoptsSameID(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 20)
	lg, _ := testLogger(t)
	cfg := f.config(t, lg)
	cfg.Prune, cfg.Drill = nil, nil
	cfg.Schedules = Schedules{Snapshot: "@every 1h"}
	cfg.Clock = newFakeClock(time.Now().UTC().Truncate(time.Second))
	got := make(chan []*repository.Manifest, 1)
	cfg.Capture = func(ctx context.Context, h CaptureHooks) error {
		var ms []*repository.Manifest
		for range 2 {
			m, err := h.Snapshot(ctx)
			if err != nil {
				return err
			}
			ms = append(ms, m)
		}
		got <- ms
		<-ctx.Done()
		return ctx.Err()
	}
	a := start(t, cfg, lg)
	ms := recv(t, "capture's two snapshots", got, time.Minute)
	if ms[0].ID != ms[1].ID {
		t.Errorf("second snapshot %s: want the stored %s adopted", ms[1].ID, ms[0].ID)
	}
	if err, _ := a.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if ids := manifests(t, f.backups); len(ids) != 1 {
		t.Errorf("backups %v: want one", ids)
	}
}
