package fleet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestMain runs the drill's children (its throwaway etcd, the restore)
// when a hub drill starts this test binary as one.
func TestMain(m *testing.M) {
	if ran, code := child.Main(os.Args, os.Stderr, restore.ChildWork()); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestHubDrills: three clusters with real backups of a real etcd in a
// bucket, one of them with a flipped byte in its newest backup's data
// object. The hub drills all three, two at once: the damaged one FAILS
// (a verdict, stored as its drill report), the two others pass, and the
// fleet read afterwards shows drill_failed for that cluster only. Every
// write went to drills/; the drill view refuses anything else; the
// scratch directory is empty afterwards.
func TestHubDrills(t *testing.T) {
	fs := newFleetStores(t)
	ec := etcdtest.Start(t, etcdtest.Options{Members: 1})
	names := []string{"able", "baker", "charlie"}
	for _, n := range names {
		snap(t, ec, fs.s3, n)
	}
	damaged := mustNewest(t, fs.s3, "baker")
	m, err := repository.New(fs.s3, "baker").Manifest(t.Context(), damaged)
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, fs.s3, m.Object)

	src := []Source{{Name: "bucket", Store: fs.s3}}
	cs, err := Read(t.Context(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	rep := NewReport(cs, DefaultPolicy(), now)
	lg, _ := jobtest.Logger(t)
	scratch := t.TempDir()
	d, err := NewDrills(DrillConfig{Schedule: "@daily", Concurrency: 2, ScratchDir: scratch, Version: "test"}, DefaultPolicy(), lg)
	if err != nil {
		t.Fatal(err)
	}
	due := d.Due(rep, now)
	if len(due) != 3 {
		t.Fatalf("%d clusters due, want 3 (never drilled)", len(due))
	}
	fs.proxy.ResetCounts()
	results := d.Run(t.Context(), src, due)
	for _, r := range results {
		passed := r.Outcome != nil && r.Outcome.Passed
		switch {
		case r.Cluster == "baker" && (passed || r.Outcome == nil || r.Outcome.RunError):
			t.Errorf("baker's drill of a damaged backup: outcome %+v, err %v; want a failed verdict", r.Outcome, r.Err)
		case r.Cluster != "baker" && !passed:
			t.Errorf("%s's drill: outcome %+v, err %v; want passed", r.Cluster, r.Outcome, r.Err)
		}
	}
	for op, n := range fs.proxy.Counts() {
		if op != "GetObject" && op != "ListObjectsV2" && op != "HeadObject" && op != "PutObject" {
			t.Errorf("the hub's drills sent %d %s requests", n, op)
		}
	}
	if es, _ := os.ReadDir(scratch); len(es) > 0 {
		for _, e := range es {
			sub, _ := os.ReadDir(scratch + "/" + e.Name())
			if len(sub) > 0 {
				t.Errorf("scratch directory %s holds %d entries after the drills", e.Name(), len(sub))
			}
		}
	}

	// The reports are the clusters' own: the fleet and the repository
	// read them; only baker has the problem.
	cs, err = Read(t.Context(), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range NewReport(cs, DefaultPolicy(), time.Now()).Clusters {
		failed := false
		for _, p := range s.Problems {
			failed = failed || p.Kind == ProblemDrillFailed
		}
		if s.Drill == nil || failed != (s.Name == "baker") {
			t.Errorf("%s after the hub's drills: drill %+v, problems %+v", s.Name, s.Drill, s.Problems)
		}
	}
	fresh, _ := NewDrills(DrillConfig{Schedule: "@daily", ScratchDir: scratch}, DefaultPolicy(), lg)
	if due := fresh.Due(NewReport(cs, DefaultPolicy(), time.Now()), time.Now()); len(due) != 0 {
		t.Errorf("%d clusters due right after their drills (by their reports), want 0", len(due))
	}
	if due := d.Due(rep, now); len(due) != 0 {
		t.Errorf("%d clusters due again by the report read before the drills, want 0 (retryAfter)", len(due))
	}

	// The view writes drill reports of its cluster only.
	v := drillView{st: fs.s3, cluster: "able"}
	for _, key := range []string{"able/snapshots/x.json", "baker/drills/x/y.json", "able/agents/a/b.json", "able/drills/../snapshots/x.json"} {
		if _, err := v.Put(t.Context(), key, strings.NewReader("{}"), uploader.PutOptions{}); !errors.Is(err, ErrReadOnly) {
			t.Errorf("drill view of able: Put %s: %v, want ErrReadOnly", key, err)
		}
	}
	if err := v.Delete(t.Context(), "able/drills/x/y.json"); !errors.Is(err, ErrReadOnly) {
		t.Errorf("drill view: Delete: %v, want ErrReadOnly", err)
	}
}

// flipByte rewrites the object at key with one byte in its middle
// flipped (the same size: only its checksum tells).
func flipByte(t *testing.T, st uploader.Store, key string) {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := st.Delete(t.Context(), key); err != nil { // objects are never replaced
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, bytes.NewReader(b), uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestHubRunDrills: the hub's Run drills the due clusters beside its
// refreshes (lifeboat_fleet_drills_total counts them), its next refresh
// shows their reports, and on the way out it saves its cache and
// returns only after the drills have ended.
func TestHubRunDrills(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ec := etcdtest.Start(t, etcdtest.Options{Members: 1})
	snap(t, ec, st, "one")
	snap(t, ec, st, "two")
	lg, _ := jobtest.Logger(t)
	d, err := NewDrills(DrillConfig{Schedule: "@daily", Concurrency: 2, ScratchDir: t.TempDir()}, DefaultPolicy(), lg)
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := t.TempDir()
	reader, err := NewCachedReader(cacheDir)
	if err != nil {
		t.Fatal(err)
	}
	tick := make(chan time.Time)
	h := NewHub(HubConfig{Sources: []Source{{Name: "dir", Store: st}}, Reader: reader, Drills: d,
		After: func(time.Duration) <-chan time.Time { return tick }}, lg)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	deadline := time.Now().Add(2 * time.Minute)
	for h.drills("passed") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("drills: passed %v, failed %v, error %v; want 2 passed", h.drills("passed"),
				h.drills("failed"), h.drills("error"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	tick <- time.Now()
	for {
		n := 0
		for _, s := range h.Report().Clusters {
			if s.Drill != nil && s.Drill.State == repository.DrillPassed {
				n++
			}
		}
		if n == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refresh after the drills shows %d passed drills, want 2", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cacheDir, CacheFile)); err != nil {
		t.Errorf("the cache after Run: %v", err)
	}
}

// drills is the hub's count of drills with result.
func (h *Hub) drills(result string) float64 {
	var m dto.Metric
	if err := h.drillRuns.WithLabelValues(result).Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
