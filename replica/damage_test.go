package replica_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// flip flips one byte in the middle of a stored object of a file://
// store, keeping its size.
func flip(t *testing.T, b *repository.Repo, key string) {
	t.Helper()
	p := filepath.Join(b.Store.(*uploader.Dir).Root(), filepath.FromSlash(key))
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestCopyDamage: a damaged data object and a damaged change segment in
// the primary are proven damage: the copy names both in its error
// (ErrDamaged, never "the next run continues"), records them in the
// primary (found by copy), copies everything else (the other backups,
// the window up to the hole), and says so again on the next run, which
// changes nothing.
func TestCopyDamage(t *testing.T) {
	primary := dirRepo(t)
	a := jobtest.PutBackup(t, primary, t0, uploader.PutOptions{}, false)
	bad := jobtest.PutBackup(t, primary, t0.Add(time.Hour), uploader.PutOptions{}, false)
	c := jobtest.PutBackup(t, primary, t0.Add(2*time.Hour), uploader.PutOptions{}, false)
	next, prev := a.Revision+1, ""
	chain(t, primary, a, 4, &next, &prev)
	segs := window(t, primary, a.ID).Segments
	badSeg := segs[2].Object.Key
	flip(t, primary, bad.Object)
	flip(t, primary, badSeg)

	to := dirRepo(t)
	lg, _ := jobtest.Logger(t)
	for run := range 2 {
		res, err := replica.Run(t.Context(), replica.Job{Name: "dr", From: primary, To: to}, lg)
		if !errors.Is(err, replica.ErrDamaged) {
			t.Fatalf("run %d: %v, want ErrDamaged", run, err)
		}
		for _, k := range []string{bad.Object, badSeg} {
			if !strings.Contains(err.Error(), k) {
				t.Errorf("run %d: error does not name %s: %v", run, k, err)
			}
		}
		if len(res.Damaged) != 2 {
			t.Errorf("run %d: damaged %+v, want the object and the segment", run, res.Damaged)
		}
		if got := ids(t, to); strings.Join(got, ",") != a.ID+","+c.ID {
			t.Errorf("run %d: the copy holds %v, want %s and %s", run, got, a.ID, c.ID)
		}
		cw := window(t, to, a.ID)
		if cw.Through != segs[1].Last || len(cw.Segments) != 2 {
			t.Errorf("run %d: the copy's window through %d with %d segments, want through %d (before the hole)", run, cw.Through, len(cw.Segments), segs[1].Last)
		}
	}
	l, err := primary.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{bad.Object, badSeg} {
		if d := l.DamageOf(k); d == nil || d.FoundBy != repository.FoundByCopy {
			t.Errorf("damage of %s not recorded in the primary: %+v", k, d)
		}
	}
}
