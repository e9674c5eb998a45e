package verify_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
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
