package repository_test

import (
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// putChain stores segments of generation gen covering the given
// [first,last] ranges (one PUT revision each), chained, and returns the
// last hash.
func putChain(t *testing.T, b *repository.Repo, gen string, snapRev int64, ranges [][2]int64) (string, string) {
	t.Helper()
	prev, key := "", ""
	for i, r := range ranges {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: gen,
			First: r[0], Last: r[1], CapturedThrough: r[1], CapturedAt: chainT0.Add(time.Duration(r[1]) * time.Second), Token: 1, PrevHash: prev}
		if i == 0 {
			h.SnapshotID, h.SnapshotRevision = gen, snapRev
		}
		s := &repository.Segment{SegmentHeader: h}
		for rev := r[0]; rev <= r[1]; rev++ {
			s.Revisions = append(s.Revisions, repository.Revision{Revision: rev, Received: chainT0.Add(time.Duration(rev) * time.Second),
				Ops: []repository.Op{{Key: []byte("/k"), Value: []byte("v"), CreateRevision: snapRev + 1, Version: rev - snapRev}}})
		}
		o, hash, err := b.PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatalf("PutSegment %v: %v", r, err)
		}
		prev, key = hash, o.Key
	}
	return key, prev
}

// TestWindows lists the recoverable windows from names alone: an
// unbroken generation with progress markers (the newest at its last
// revision gives the time), a generation with a gap (the window stops
// before it, the rest is stray), a generation whose anchor is not
// committed (not recoverable), and a sealed one.
func TestWindows(t *testing.T) {
	ctx := t.Context()
	b := dirBackups(t, t.TempDir())
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	good := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	gapped := jobtest.PutBackup(t, b, t0.Add(time.Hour), uploader.PutOptions{}, true)
	orphan := jobtest.PutObject(t, b, t0.Add(2*time.Hour), uploader.PutOptions{}) // never committed

	s := good.Revision
	key, hash := putChain(t, b, good.ID, s, [][2]int64{{s + 1, s + 3}, {s + 4, s + 4}, {s + 5, s + 9}})
	for i, at := range []time.Time{t0.Add(time.Minute), t0.Add(3 * time.Minute)} {
		p := &repository.Progress{Format: repository.ProgressFormat, Generation: good.ID, ClusterID: "2a", SnapshotID: good.ID,
			SnapshotRevision: s, Through: s + 9, At: at, LastSegment: key, LastHash: hash, Token: 1}
		if i == 1 {
			p.Sealed, p.SealReason = true, "compacted"
		}
		if _, err := b.PutProgress(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	g := gapped.Revision
	putChain(t, b, gapped.ID, g, [][2]int64{{g + 1, g + 2}, {g + 5, g + 6}})
	putChain(t, b, orphan.ID, orphan.Revision, [][2]int64{{orphan.Revision + 1, orphan.Revision + 1}})

	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("%d windows, want 3: %+v", len(ws), ws)
	}
	w := ws[0]
	if w.Generation != good.ID || !w.Recoverable() || w.From != s || w.Through != s+9 || len(w.Segments) != 3 || w.Problem != "" {
		t.Errorf("good window: %+v", w)
	}
	if !w.ThroughTime.Equal(t0.Add(3*time.Minute)) || !w.Sealed || w.SealReason != "compacted" {
		t.Errorf("good window time %s sealed %v %q", w.ThroughTime, w.Sealed, w.SealReason)
	}
	if !w.Contains(s) || !w.Contains(s+9) || w.Contains(s+10) || w.Contains(s-1) {
		t.Errorf("Contains wrong for %s", w.String())
	}
	w = ws[1]
	if w.Generation != gapped.ID || w.Through != g+2 || len(w.Segments) != 1 || len(w.Stray) != 1 ||
		!strings.Contains(w.Problem, "missing") || !w.ThroughTime.Equal(gapped.CreatedAt) {
		t.Errorf("gapped window: %+v", w)
	}
	w = ws[2]
	if w.Generation != orphan.ID || w.Recoverable() || w.Contains(orphan.Revision) || len(w.Stray) != 1 || w.Problem == "" {
		t.Errorf("uncommitted window: %+v", w)
	}
}

func TestParseProgressName(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 123, time.UTC)
	b := repository.New(nil, "c")
	k := b.ProgressKey("g", 42, at, true)
	name := k[strings.LastIndex(k, "/")+1:]
	through, got, sealed, err := repository.ParseProgressName(name)
	if err != nil || through != 42 || !got.Equal(at) || !sealed {
		t.Fatalf("%s: %d %s %v %v", name, through, got, sealed, err)
	}
	for _, bad := range []string{"", "x.json", "42-1.json", "00000000000000000042-0000000000000000001.txt", "+0000000000000000042-0000000000000000001.json"} {
		if _, _, _, err := repository.ParseProgressName(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseProgress: a marker's body and name never panic, and what parses
// validates and round-trips through its name.
func FuzzParseProgress(f *testing.F) {
	f.Add([]byte(`{"format":1,"generation":"20261201T100000Z-r8","cluster_id":"2a","snapshot_id":"20261201T100000Z-r8","snapshot_revision":8,"through":8,"at":"2026-12-01T10:00:00Z","token":1}`), "00000000000000000008-1796133034892973423.json")
	f.Add([]byte(`{"format":1,"sealed":true}`), "00000000000000000008-0000000000000000000.sealed.json")
	f.Add([]byte(`null`), "x")
	f.Fuzz(func(t *testing.T, body []byte, name string) {
		if p, err := repository.ParseProgress(body); err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("parsed but invalid: %v", err)
			}
		}
		through, at, sealed, err := repository.ParseProgressName(name)
		if err != nil {
			return
		}
		k := repository.New(nil, "c").ProgressKey("g", through, at, sealed)
		if !strings.HasSuffix(k, "/"+name) {
			t.Fatalf("name %q parsed to (%d, %s, %v), which names %q", name, through, at, sealed, k)
		}
	})
}
