package inspect

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// TestIndex: the index of a real snapshot holds exactly the live keys at
// its revision with their mod revision, create revision, version and
// size, whatever the runs the build sorts in (one, or many small ones
// merged), whatever the way it is fed (a scan of the key bucket, the file
// check's walkers, parts fed in any order, a restart): puts, overwrites,
// deletes, a delete then a re-create.
func TestIndex(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	cli := c.Client(t)
	for i := range 300 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/registry/pods/ns-%d/p-%03d", i%7, i), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 300; i += 3 {
		cli.Put(ctx, fmt.Sprintf("/registry/pods/ns-%d/p-%03d", i%7, i), "overwritten")
	}
	for i := 0; i < 300; i += 5 {
		cli.Delete(ctx, fmt.Sprintf("/registry/pods/ns-%d/p-%03d", i%7, i))
	}
	for i := 0; i < 300; i += 25 {
		cli.Put(ctx, fmt.Sprintf("/registry/pods/ns-%d/p-%03d", i%7, i), "recreated")
	}
	cli.Delete(ctx, "/registry/pods/ns-0/p-000", clientv3.WithRange("/registry/pods/ns-0/p-100")) // a multi-key delete: one revision, several sub revisions
	want, err := cli.Get(ctx, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	db := filepath.Join(dir, "snap.db")
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Create(db)
	io.Copy(f, rc)
	rc.Close()
	f.Close()

	// The records of the key bucket, in revision order, to feed builders.
	type rec struct{ k, v []byte }
	var recs []rec
	keys, err := verify.OpenKeys(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	if err := keys.Scan(ctx, func(k, v []byte) error { recs = append(recs, rec{bytes.Clone(k), bytes.Clone(v)}); return nil }); err != nil {
		t.Fatal(err)
	}
	keys.Close()
	// fed builds the index through a builder fed in parts: the records cut
	// in len(cuts)+1 parts at the given fractions, each part fed by its own
	// walker, the later parts first (walkers run side by side: no order
	// between them); restart feeds everything once, restarts, then feeds.
	fed := func(cuts []float64, restart bool) func(p string) error {
		return func(p string) error {
			_, err := writeIndexWith(p, func(w io.Writer) (int, error) {
				b := newIndexBuilder(ctx, filepath.Dir(p))
				defer b.close()
				feed := func() error {
					bounds := []int{0}
					for _, c := range cuts {
						bounds = append(bounds, int(c*float64(len(recs))))
					}
					bounds = append(bounds, len(recs))
					for i := len(bounds) - 2; i >= 0; i-- {
						sink := b.Walker()
						for _, r := range recs[bounds[i]:bounds[i+1]] {
							if err := sink(r.k, r.v); err != nil {
								return err
							}
						}
					}
					return nil
				}
				if restart {
					if err := feed(); err != nil {
						return 0, err
					}
					b.Restart()
				}
				if err := feed(); err != nil {
					return 0, err
				}
				return b.finish(want.Header.Revision, "sha", w)
			})
			return err
		}
	}
	type build struct {
		name  string
		write func(p string) error
	}
	builds := []build{
		{"scan", func(p string) error { _, err := writeIndex(ctx, db, p, want.Header.Revision, "sha"); return err }},
		{"file check", func(p string) error {
			_, err := writeIndexWith(p, func(w io.Writer) (int, error) {
				b := newIndexBuilder(ctx, filepath.Dir(p))
				defer b.close()
				if _, err := verify.FileRecords(ctx, db, b); err != nil {
					return 0, err
				}
				return b.finish(want.Header.Revision, "sha", w)
			})
			return err
		}},
		{"two parts", fed([]float64{0.5}, false)},
		{"three parts after a restart", fed([]float64{0.2, 0.7}, true)},
	}
	for _, budget := range []int{8 << 20, 2000, 300} {
		for _, bd := range builds {
			t.Run(fmt.Sprintf("%s/%d", bd.name, budget), func(t *testing.T) {
				old := runBudget
				runBudget = budget
				defer func() { runBudget = old }()
				p := filepath.Join(t.TempDir(), "index")
				if err := bd.write(p); err != nil {
					t.Fatal(err)
				}
				checkIndex(t, p, want)
			})
		}
	}
}

// checkIndex: the index at p holds exactly the live keys of want.
func checkIndex(t *testing.T, p string, want *clientv3.GetResponse) {
	t.Helper()
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(p), ".index-run-*")); len(left) != 0 {
		t.Errorf("runs left behind: %v", left)
	}
	ix, err := openIndex(p, "sha")
	if err != nil {
		t.Fatal(err)
	}
	defer ix.close()
	if ix.count != int64(len(want.Kvs)) {
		t.Fatalf("%d keys indexed, etcd has %d", ix.count, len(want.Kvs))
	}
	i := 0
	err = ix.scan("", func(e *Entry) error {
		w := want.Kvs[i]
		i++
		if e.Key != string(w.Key) || e.ModRevision != w.ModRevision || e.CreateRevision != w.CreateRevision ||
			e.Version != w.Version || e.Size != int64(len(w.Value)) {
			return fmt.Errorf("entry %+v, etcd has %s mod %d create %d version %d", *e, w.Key, w.ModRevision, w.CreateRevision, w.Version)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"/registry/pods/ns-0/p-000", "/registry/pods/ns-3/p-003", "/registry/pods/ns-4/p-025"} {
		_, ok, err := ix.get(k)
		live := false
		for _, w := range want.Kvs {
			live = live || string(w.Key) == k
		}
		if err != nil || ok != live {
			t.Errorf("get %s: found %v, live %v, %v", k, ok, live, err)
		}
	}
}
