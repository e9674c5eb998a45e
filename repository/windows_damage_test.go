package repository_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// flipByte flips one byte in the middle of a stored object of a file://
// store under dir.
func flipByte(t *testing.T, dir, key string) {
	t.Helper()
	p := filepath.Join(dir, "store", filepath.FromSlash(key))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestWindowDamage: a flipped byte in a stored segment is found by
// verify --changes, which records it; from then on the window is the
// window as it really is: it ends before the damaged segment, names it,
// the revisions lost and those after the hole, until the object is gone.
func TestWindowDamage(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := dirBackups(t, dir)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	putChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 3}, {s + 4, s + 5}, {s + 6, s + 9}})
	segs, _, err := b.ListSegments(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	bad := segs[1].Object.Key
	flipByte(t, dir, bad)

	c := verifyOne(t, b, m.ID)
	var de *repository.DamageError
	if !errors.As(c.Problem, &de) || de.Key != bad || !repository.IsDamage(c.Problem) {
		t.Fatalf("verify: %v, want a *DamageError naming %s", c.Problem, bad)
	}
	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := l.DamageOf(bad)
	if d == nil || d.FoundBy != repository.FoundByVerify {
		t.Fatalf("verify recorded no damage of %s: %+v", bad, l.Damage)
	}
	ws, err := b.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	if w.Through != s+3 || len(w.Segments) != 1 || len(w.Damaged) != 1 || w.Damaged[0].Object != bad {
		t.Errorf("window through %d, %d segments, damaged %+v: want through %d, one segment, %s damaged", w.Through, len(w.Segments), w.Damaged, s+3, bad)
	}
	for _, want := range []string{"damaged", bad, "recoverable through revision", "revisions 6-9"} {
		want = strings.ReplaceAll(want, "revisions 6-9", "revisions "+itoa(s+6)+"-"+itoa(s+9))
		if !strings.Contains(w.Problem, want) {
			t.Errorf("problem %q does not say %q", w.Problem, want)
		}
	}

	// The object replaced by a sound copy (here: deleted and the chain
	// rewritten): the record is obsolete, the window whole again.
	if err := b.Store.Delete(ctx, bad); err != nil {
		t.Fatal(err)
	}
	for _, s := range segs {
		b.Store.Delete(ctx, s.Object.Key)
	}
	putChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 3}, {s + 4, s + 5}, {s + 6, s + 9}})
	l, err = b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err = b.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	if w := ws[0]; w.Problem != "" || w.Through != s+9 || len(l.Damage.Obsolete) != 1 {
		t.Errorf("after the repair: window %q through %d, obsolete records %d", w.Problem, w.Through, len(l.Damage.Obsolete))
	}
}

// TestWindowDamageRoutedAround: a damaged compacted segment whose
// sources are still stored is a window problem, but the window goes
// around it through its sources (a replay reads those).
func TestWindowDamageRoutedAround(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	b := dirBackups(t, dir)
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	m := jobtest.PutBackup(t, b, t0, uploader.PutOptions{}, true)
	s := m.Revision
	putChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 3}, {s + 4, s + 5}, {s + 6, s + 9}})
	l, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := b.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	st := repository.CompactStep{Generation: m.ID, Level: 1, Bucket: chainT0.Truncate(time.Hour), Sources: ws[0].Segments[:2]}
	out, err := b.Compact(ctx, st, repository.CompactPolicy{Levels: []time.Duration{time.Hour}}, repository.Encoding{Compression: "zstd"}, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("compact: %v, %v", out, err)
	}
	flipByte(t, dir, out[0].Object.Key)
	if err := b.RecordDamage(ctx, repository.Damage{Object: out[0].Object.Key, FoundBy: repository.FoundByScrub, Error: "checksum mismatch"}); err != nil {
		t.Fatal(err)
	}
	l, err = b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err = b.Windows(ctx, l)
	if err != nil {
		t.Fatal(err)
	}
	w := ws[0]
	if w.Through != s+9 || len(w.Segments) != 3 || len(w.Damaged) != 1 || !strings.Contains(w.Problem, out[0].Object.Key) || !strings.Contains(w.Problem, "goes around") {
		t.Errorf("window through %d, %d segments, problem %q: want through %d over the 3 sources, the damage named", w.Through, len(w.Segments), w.Problem, s+9)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
