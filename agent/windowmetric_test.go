package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCaptureWindowProblems: lifeboat_capture_window_problems counts the
// store's capture windows with a problem (repository.Window.Problem), as
// the agent's refresh lists them: 0 for an empty store, then 1 for a
// generation whose segments have no anchor snapshot, and, once its
// problem is gone, 0 again.
func TestCaptureWindowProblems(t *testing.T) {
	lg, _ := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	clock := newFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	a := start(t, Config{
		Backups: b, Snapshot: &backup.Job{Backups: b}, Capture: newFakeCapture().run,
		Listen: "127.0.0.1:0", Clock: clock, Registry: NewRegistry(), Version: "test",
		RefreshInterval: time.Minute,
	}, lg)
	mfs, body := scrape(t, a.url)
	if got := must(t, mfs, "lifeboat_capture_window_problems"); got != 0 {
		t.Errorf("lifeboat_capture_window_problems on an empty store = %v, want 0", got)
	}
	promtoolCheck(t, body)
	key := testCluster + "/changes/20261201T095900Z-r10/" + repository.SegmentName(11, 12, repository.Encoding{Compression: "zstd"})
	if _, err := st.Put(t.Context(), key, strings.NewReader("segment"), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []float64{1, 0} {
		waitFor(t, "the next refresh", 10*time.Second, func() bool { return clock.hasWaiter(clock.Now().Add(time.Minute)) })
		clock.Advance(time.Minute)
		waitFor(t, "lifeboat_capture_window_problems", 10*time.Second, func() bool {
			return must(t, gather(t, a.reg), "lifeboat_capture_window_problems") == want
		})
		if err := st.Delete(t.Context(), key); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCaptureWindowDamage: a damage record of a segment inside a sound
// window makes it a window problem (lifeboat_capture_window_problems 1,
// and so LifeboatCaptureWindowBroken), and /status says which object.
func TestCaptureWindowDamage(t *testing.T) {
	lg, _ := testLogger(t)
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: testCluster}
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	var keys []string
	prev := ""
	for i, r := range [][2]int64{{1, 2}, {3, 4}, {5, 6}} {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID,
			First: m.Revision + r[0], Last: m.Revision + r[1], CapturedThrough: m.Revision + r[1], CapturedAt: t0, Token: 1, PrevHash: prev}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		s := &repository.Segment{SegmentHeader: h}
		for rev := h.First; rev <= h.Last; rev++ {
			s.Revisions = append(s.Revisions, repository.Revision{Revision: rev, Received: t0, Ops: []repository.Op{{Key: []byte("/k"), Value: []byte("v"), CreateRevision: m.Revision + 1, Version: rev - m.Revision}}})
		}
		o, hash, err := b.PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatal(err)
		}
		keys, prev = append(keys, o.Key), hash
	}
	if err := b.RecordDamage(t.Context(), repository.Damage{Object: keys[1], FoundBy: repository.FoundByDrill, Error: "checksum mismatch"}); err != nil {
		t.Fatal(err)
	}
	clock := newFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	a := start(t, Config{
		Backups: b, Snapshot: &backup.Job{Backups: b}, Capture: newFakeCapture().run,
		Listen: "127.0.0.1:0", Clock: clock, Registry: NewRegistry(), Version: "test",
		RefreshInterval: time.Minute,
	}, lg)
	waitFor(t, "lifeboat_capture_window_problems", 10*time.Second, func() bool {
		return must(t, gather(t, a.reg), "lifeboat_capture_window_problems") == 1
	})
	ps := a.captureStatus(clock.Now()).WindowProblems
	if len(ps) != 1 || !strings.Contains(ps[0], keys[1]) || !strings.Contains(ps[0], "damaged") {
		t.Errorf("status window problems %q, want the damaged %s named", ps, keys[1])
	}
}
