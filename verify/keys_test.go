package verify_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestKeys: Keys' scan and lookups return exactly what bbolt holds in the
// key bucket of a real snapshot (tombstones and compaction included), and
// a damaged file is an ErrCorrupt error, never a panic.
func TestKeys(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	h := history{tb: t, ctx: ctx, cli: c.Client(t)}
	h.puts("/registry/pods/default/p", 300, 900)
	mid := h.puts("/registry/pods/default/p", 50, 200)
	h.del("/registry/pods/default/p0003")
	h.compact(mid)
	h.puts("/registry/events/default/e", 10, 80)
	path := saveSnapshot(t, ctx, c.ClientConfig(), c.Members[0].ClientURL, t.TempDir())

	type rec struct{ k, v []byte }
	var want []rec
	db, err := bolt.Open(path, 0o400, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	db.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("key")).ForEach(func(k, v []byte) error {
			want = append(want, rec{bytes.Clone(k), bytes.Clone(v)})
			return nil
		})
	})
	db.Close()

	keys, err := verify.OpenKeys(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	var got []rec
	if err := keys.Scan(ctx, func(k, v []byte) error { got = append(got, rec{bytes.Clone(k), bytes.Clone(v)}); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("scan: %d records, bbolt has %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i].k, want[i].k) || !bytes.Equal(got[i].v, want[i].v) {
			t.Fatalf("record %d: %x, bbolt has %x", i, got[i].k, want[i].k)
		}
	}
	for _, i := range []int{0, 1, len(want) / 3, len(want) / 2, len(want) - 1} {
		v, err := keys.Get(ctx, want[i].k)
		if err != nil || !bytes.Equal(v, want[i].v) {
			t.Errorf("get %x: %v, equal %v", want[i].k, err, bytes.Equal(v, want[i].v))
		}
	}
	if v, err := keys.Get(ctx, []byte("\x7f\x00\x00\x00\x00\x00\x00\x00_\x00\x00\x00\x00\x00\x00\x00\x00")); v != nil || err != nil {
		t.Errorf("get of an absent revision: %x %v", v, err)
	}
	stop := errors.New("stop")
	n := 0
	if err := keys.Scan(ctx, func(k, v []byte) error { n++; return stop }); !errors.Is(err, stop) || n != 1 {
		t.Errorf("scan stopped by its function: %v after %d", err, n)
	}

	// Damage: every page after the meta pages overwritten in turn with
	// garbage must give an error or the right answer, never a panic.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const ps = 4096
	for off := 2 * ps; off+ps <= len(b)-32; off += ps * 7 {
		bad := bytes.Clone(b)
		for i := off; i < off+64; i++ {
			bad[i] = 0xff
		}
		p := filepath.Join(t.TempDir(), "bad.db")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := verify.OpenKeys(ctx, p)
		if err != nil {
			if !errors.Is(err, verify.ErrCorrupt) {
				t.Errorf("page %d damaged: open: %v, want ErrCorrupt", off/ps, err)
			}
			continue
		}
		err = k.Scan(ctx, func(k, v []byte) error { return nil })
		if err != nil && !errors.Is(err, verify.ErrCorrupt) {
			t.Errorf("page %d damaged: scan: %v, want ErrCorrupt", off/ps, err)
		}
		k.Close()
	}
}

// walkRecords collects what FileRecords hands over, per walker.
type walkRecords struct {
	mu       sync.Mutex
	walkers  [][]recKV
	restarts int
}

type recKV struct{ k, v []byte }

func (w *walkRecords) Walker() func(k, v []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	i := len(w.walkers)
	w.walkers = append(w.walkers, nil)
	return func(k, v []byte) error {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.walkers[i] = append(w.walkers[i], recKV{bytes.Clone(k), bytes.Clone(v)})
		return nil
	}
}

func (w *walkRecords) Restart() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.walkers = nil
	w.restarts++
}

// TestFileRecords: FileRecords hands over every record of the key bucket
// exactly once, each walker's in revision order, whether the bucket is
// walked in one piece or in two halves side by side; the status is
// File's; an error of the receiver ends the check with that error.
func TestFileRecords(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	h := history{tb: t, ctx: ctx, cli: c.Client(t)}
	h.puts("/registry/pods/default/p", 400, 900)
	h.del("/registry/pods/default/p0003")
	h.puts("/registry/pods/default/p", 30, 200)
	path := saveSnapshot(t, ctx, c.ClientConfig(), c.Members[0].ClientURL, t.TempDir())
	want, err := verify.File(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var all []recKV
	keys, err := verify.OpenKeys(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer keys.Close()
	if err := keys.Scan(ctx, func(k, v []byte) error { all = append(all, recKV{bytes.Clone(k), bytes.Clone(v)}); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		minPages uint64
		walkers  int
	}{{"one piece", 0, 1}, {"two halves", 1, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			var w walkRecords
			st, err := verify.FileSplitRecords(ctx, path, tc.minPages, &w)
			if err != nil || st != want {
				t.Fatalf("FileSplitRecords = %+v, %v; File gave %+v", st, err, want)
			}
			if len(w.walkers) != tc.walkers {
				t.Fatalf("%d walkers, want %d", len(w.walkers), tc.walkers)
			}
			// The walkers start in any order: each one's records are a
			// range of the bucket, in order.
			slices.SortFunc(w.walkers, func(a, b []recKV) int {
				if len(a) == 0 || len(b) == 0 {
					return len(a) - len(b)
				}
				return bytes.Compare(a[0].k, b[0].k)
			})
			var got []recKV
			for i, recs := range w.walkers {
				for j := 1; j < len(recs); j++ {
					if bytes.Compare(recs[j-1].k, recs[j].k) >= 0 {
						t.Fatalf("walker %d: record %x after %x", i, recs[j].k, recs[j-1].k)
					}
				}
				got = append(got, recs...)
			}
			if len(got) != len(all) {
				t.Fatalf("%d records handed over, the key bucket holds %d", len(got), len(all))
			}
			for i := range all {
				if !bytes.Equal(got[i].k, all[i].k) || !bytes.Equal(got[i].v, all[i].v) {
					t.Fatalf("record %d: %x, the key bucket has %x", i, got[i].k, all[i].k)
				}
			}
		})
	}
	stop := errors.New("receiver stops")
	if _, err := verify.FileRecords(ctx, path, stopRecords{stop}); !errors.Is(err, stop) {
		t.Errorf("FileRecords with a failing receiver: %v, want its error", err)
	}
}

type stopRecords struct{ err error }

func (s stopRecords) Walker() func(k, v []byte) error {
	return func(k, v []byte) error { return s.err }
}
func (s stopRecords) Restart() {}
