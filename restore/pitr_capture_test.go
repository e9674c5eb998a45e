package restore_test

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// TestPointInTimeWithCapture restores points in time from what the real
// capture job wrote (capture.Run, encrypted segments), not the test-only
// capture: the two parts agree on the format, the chain and the markers.
func TestPointInTimeWithCapture(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	id := restoretest.NewIdentity(t)
	s := &restoretest.PITRSource{C: c, Cli: cli, Repo: restoretest.DirRepo(t, t.TempDir()), IDs: []age.Identity{id}, Recorded: map[int64]restoretest.LiveState{}}
	w := &restoretest.Workload{T: t, Cli: cli, Rnd: rand.New(rand.NewPCG(21, 8)), Keys: map[string]bool{}}
	for range 10 {
		w.Step(ctx)
	}
	lg := slog.New(slog.DiscardHandler)
	cfg := snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second}
	sess, err := snapshot.Dial(ctx, cfg, lg)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- capture.Run(rctx, capture.Job{
			Session: sess, Repo: s.Repo, Encoding: restoretest.AgeEncoding(id), Interval: 100 * time.Millisecond,
			Token: func() (int64, bool) { return 3, true },
			Snapshot: func(ctx context.Context) (*repository.Manifest, error) {
				return backup.Run(ctx, backup.Job{Etcd: cfg, SpoolDir: t.TempDir(), Backups: s.Repo, Encoding: restoretest.AgeEncoding(id), Version: "test"}, lg)
			},
		}, lg)
	}()
	stop := func() {
		if cancel == nil {
			return
		}
		cancel()
		cancel = nil
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("capture: %v", err)
		}
		sess.Close()
	}
	defer stop()
	// The changes to restore are those after the generation's snapshot:
	// write them once capture has its generation (its snapshot may be
	// taken after a watch that waits for etcd to catch up).
	for deadline := time.Now().Add(60 * time.Second); ; {
		l, err := s.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ws, err := s.Repo.Windows(ctx, l); err == nil && len(ws) > 0 && ws[len(ws)-1].Recoverable() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("capture started no generation in 60s")
		}
		time.Sleep(50 * time.Millisecond) // polling the store against a deadline
	}
	for range 120 {
		w.Step(ctx)
	}
	cur := restoretest.Revision(t, cli)
	// Wait until capture has made everything up to cur durable.
	var win repository.Window
	deadline := time.Now().Add(60 * time.Second)
	for {
		l, err := s.Repo.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ws, err := s.Repo.Windows(ctx, l)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(ws); n > 0 && ws[n-1].Recoverable() && ws[n-1].Through >= cur {
			win = ws[n-1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("capture not durable through %d in 60s: windows %v", cur, ws)
		}
		time.Sleep(50 * time.Millisecond) // polling the store against a deadline
	}
	stop()
	if len(win.Segments) == 0 {
		t.Fatalf("window %s has no segments", win.String())
	}
	rnd := rand.New(rand.NewPCG(2, 2))
	targets := []int64{win.From, win.Through}
	for range 6 {
		targets = append(targets, win.From+1+rnd.Int64N(win.Through-win.From))
	}
	for _, r := range targets {
		p, path := replayTo(t, s, restore.Target{Revision: r})
		if p.Window.Generation != win.Generation {
			t.Errorf("plan to %d in generation %s, want %s", r, p.Window.Generation, win.Generation)
		}
		checkOffline(t, s, path, r)
	}
	// The time of the newest marker (listed again: the one vouching for
	// Through may have come after the poll) resolves to its revision.
	l, err := s.Repo.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := s.Repo.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	last := ws[len(ws)-1]
	p, err := restore.PlanPointInTime(ctx, s.Repo, l, restore.Target{Time: last.ThroughTime}, s.IDs)
	switch {
	case err != nil:
		t.Errorf("plan to %s: %v", last.ThroughTime, err)
	case last.ThroughTime.After(last.FromTime) && p.Revision != last.Through:
		t.Errorf("plan to %s: revision %d, want %d", last.ThroughTime, p.Revision, last.Through)
	}
}
