package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCopyToSecondStore: lifeboat copy makes a complete store of a
// second directory: list names both stores, and from the copy alone
// verify passes and restore --to-revision lands on the revision; a
// damaged object in the copy fails the copy's verify and drill, not the
// primary's.
func TestCopyToSecondStore(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	e := newDrillEnv(t)
	e.snapshot(t)
	e.snapshot(t)
	repo := e.backups(t)
	l, err := repo.List(ctx)
	if err != nil || len(l.Backups) != 2 {
		t.Fatalf("backups: %v %v", l, err)
	}
	anchor := l.Backups[0].Manifest
	cli := e.c.Client(t)
	c := changetest.Start(t, changetest.Options{Client: cli, Repo: repo, Anchor: anchor, SegmentRevisions: 3})
	for i := range 12 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/copy/k%d", i%5), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	through := c.Sync(t)
	target := through - 2

	copyDir := filepath.Join(t.TempDir(), "copy")
	withCopy := func(args ...string) []string { return append(append(args, e.args...), "--copy", "file://"+copyDir) }
	fromCopy := func(args ...string) []string { return append(append(args, e.args...), "--store", "file://"+copyDir) }

	code, out, errOut := runCLI(t, nil, withCopy("copy")...)
	if code != 0 {
		t.Fatalf("copy: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "copy copy1: copied 2 backups, 0 kits, 4 segments, 1 markers") || !strings.Contains(out, "it holds 2 backups") {
		t.Errorf("copy's output:\n%s", out)
	}

	t.Run("again copies nothing", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, withCopy("copy", "--dry-run")...)
		if code != 0 || !strings.Contains(out, "would copy 0 backups, 0 kits, 0 segments, 0 markers") {
			t.Errorf("copy --dry-run: exit %d\n%s\n%s", code, out, errOut)
		}
	})

	t.Run("list names the stores", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, withCopy("list")...)
		if code != 0 || !strings.Contains(out, "STORES") || strings.Count(out, "primary,copy1") != 2 {
			t.Errorf("list: exit %d\n%s\n%s", code, out, errOut)
		}
		code, out, _ = runCLI(t, nil, withCopy("list", "-o", "json")...)
		var res listOutput
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
			t.Fatalf("list -o json: exit %d, %v\n%s", code, err, out)
		}
		if got := res.Backups[0].Stores; len(got) != 2 || got[0] != "primary" || got[1] != "copy1" {
			t.Errorf("stores of %s: %v", res.Backups[0].ID, got)
		}
	})

	t.Run("restore to a revision from the copy", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, fromCopy("restore", "--to-revision", fmt.Sprint(target), "--data-dir", dir,
			"--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380")...)
		if code != 0 {
			t.Fatalf("restore from the copy: exit %d\n%s\n%s", code, out, errOut)
		}
		lg := zap.NewNop()
		be := backend.NewDefaultBackend(lg, filepath.Join(dir, "member", "snap", "db"))
		kv := mvcc.NewStore(lg, be, nil, mvcc.StoreConfig{})
		defer func() { kv.Close(); be.Close() }()
		if kv.Rev() != target {
			t.Errorf("restored revision %d, want %d", kv.Rev(), target)
		}
	})

	t.Run("a damaged object in the copy", func(t *testing.T) {
		if code, out, errOut := runCLI(t, nil, fromCopy("verify", "latest")...); code != 0 {
			t.Fatalf("verify of the intact copy: exit %d\n%s\n%s", code, out, errOut)
		}
		path := filepath.Join(copyDir, filepath.FromSlash(anchor.Object))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/2] ^= 0x40
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, out, errOut := runCLI(t, nil, fromCopy("verify", "latest")...); code != 1 {
			t.Errorf("verify of the damaged copy: exit %d, want 1\n%s\n%s", code, out, errOut)
		}
		if code, out, errOut := runCLI(t, nil, fromCopy("drill", "latest")...); code != 1 || !strings.Contains(out, "FAILED") {
			t.Errorf("drill of the damaged copy: exit %d, want 1\n%s\n%s", code, out, errOut)
		}
		if code, out, errOut := runCLI(t, nil, append([]string{"drill", "latest"}, e.args...)...); code != 0 {
			t.Errorf("drill of the primary: exit %d, want 0\n%s\n%s", code, out, errOut)
		}
		// The copy's drill report is in the copy, not the primary.
		st, err := uploader.NewDir(copyDir)
		if err != nil {
			t.Fatal(err)
		}
		drills, err := (&repository.Repo{Store: st, Cluster: "test"}).LastDrills(ctx)
		if err != nil || drills[anchor.ID] == nil || drills[anchor.ID].Passed {
			t.Errorf("the copy's last drill of %s: %+v %v", anchor.ID, drills[anchor.ID], err)
		}
	})
}

// TestPrunePerStore: prune applies each store's own policy, the copy's
// from its retention block, and reports each store.
func TestPrunePerStore(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	for range 3 {
		e.snapshot(t)
	}
	copyDir := filepath.Join(t.TempDir(), "copy")
	cfg := writeFile(t, "c.yaml", "retention: {keep_last: 1}\ncopies:\n  - name: dr\n    url: file://"+copyDir+"\n    retention: {keep_last: 2}\n")
	args := func(a ...string) []string { return append(append(a, e.args...), "--config", cfg) }
	if code, out, errOut := runCLI(t, nil, args("copy")...); code != 0 || !strings.Contains(out, "copied 2 backups") {
		t.Fatalf("copy (the copy's policy keeps 2): exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, nil, args("prune")...)
	if code != 0 {
		t.Fatalf("prune: exit %d\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "copy dr (file://"+copyDir+"):") {
		t.Errorf("prune does not report the copy:\n%s", out)
	}
	primary := e.backups(t)
	st, err := uploader.NewDir(copyDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		repo *repository.Repo
		want int
	}{{primary, 1}, {&repository.Repo{Store: st, Cluster: "test"}, 2}} {
		l, err := c.repo.List(t.Context())
		if err != nil || len(l.Backups) != c.want {
			t.Errorf("%s holds %d backups after prune, want %d (%v)", c.repo.Store, len(l.Backups), c.want, err)
		}
	}
}
