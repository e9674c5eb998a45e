package inspect

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
)

// TestIndex: the index of a real snapshot holds exactly the live keys at
// its revision with their mod revision, create revision, version and
// size, whatever the runs the build sorts in (one, or many small ones
// merged): puts, overwrites, deletes, a delete then a re-create.
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

	for _, budget := range []int{8 << 20, 2000, 300} {
		t.Run(fmt.Sprint(budget), func(t *testing.T) {
			old := runBudget
			runBudget = budget
			defer func() { runBudget = old }()
			p := filepath.Join(t.TempDir(), "index")
			if _, err := writeIndex(ctx, db, p, want.Header.Revision, "sha"); err != nil {
				t.Fatal(err)
			}
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
				_, live := func() (int, bool) {
					for _, w := range want.Kvs {
						if string(w.Key) == k {
							return 0, true
						}
					}
					return 0, false
				}()
				if err != nil || ok != live {
					t.Errorf("get %s: found %v, live %v, %v", k, ok, live, err)
				}
			}
		})
	}
}
