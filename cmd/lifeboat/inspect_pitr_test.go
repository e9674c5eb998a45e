package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestInspectPointInTime: ls, get and diff at revisions inside a capture
// window: the snapshot plus the captured changes replayed, built once into
// the cache; a deleted ConfigMap is there just before its deletion.
func TestInspectPointInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	e := newInspectEnv(t)
	storeDir := filepath.Join(e.dir, "store")
	base := []string{"--store", "file://" + storeDir, "--cluster", "prod", "--log-level", "error", "--spool-dir", filepath.Join(e.dir, "spool")}
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--endpoints", e.c.Endpoints()[0]}, base...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s%s", code, out, errOut)
	}
	st, err := uploader.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	repo := &repository.Repo{Store: st, Cluster: "prod"}
	l, err := repo.List(ctx)
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	anchor := l.Backups[0].Manifest
	c := changetest.Start(t, changetest.Options{Client: e.cli, Repo: repo, Anchor: anchor, SegmentRevisions: 2})
	for i := range 3 {
		if _, err := e.cli.Put(ctx, fmt.Sprintf("/app/counter-%d", i), "x"); err != nil {
			t.Fatal(err)
		}
	}
	del, err := e.cli.Delete(ctx, "/registry/configmaps/shop/web-config")
	if err != nil {
		t.Fatal(err)
	}
	deletedAt := del.Header.Revision
	if _, err := e.cli.Put(ctx, "/app/after", "y"); err != nil {
		t.Fatal(err)
	}
	c.Sync(t)
	cache := filepath.Join(e.dir, "cache")
	cli := func(t *testing.T, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, nil, append(append(args, base...), "--cache-dir", cache)...)
	}
	before := fmt.Sprint(deletedAt - 1)

	t.Run("get just before the deletion", func(t *testing.T) {
		code, out, errOut := cli(t, "get", "--at-revision", before, "/registry/configmaps/shop/web-config", "--for-apply")
		if code != 0 || !strings.Contains(out, "color: blue") || strings.Contains(out, "resourceVersion") {
			t.Fatalf("get --at-revision %s: exit %d\n%s%s", before, code, out, errOut)
		}
		if !strings.Contains(errOut, "replayed, cached") || !strings.Contains(errOut, anchor.ID) {
			t.Errorf("first query of a point in time: %s", errOut)
		}
		code, out, errOut = cli(t, "get", "@"+before, "/registry/configmaps/shop/web-config")
		if code != 0 || !strings.Contains(out, "color: blue") || errOut != "" {
			t.Errorf("second get (from the cache): exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("not found at the deletion", func(t *testing.T) {
		code, _, errOut := cli(t, "get", "--at-revision", fmt.Sprint(deletedAt), "/registry/configmaps/shop/web-config")
		if want := fmt.Sprintf("not found at revision %d", deletedAt); code != 1 || !strings.Contains(errOut, want) {
			t.Errorf("get at the deletion: exit %d %s", code, errOut)
		}
	})

	t.Run("ls", func(t *testing.T) {
		code, out, _ := cli(t, "ls", "--at-revision", before, "/app/")
		if code != 0 || strings.Count(out, "counter-") != 3 || strings.Contains(out, "after") {
			t.Errorf("ls --at-revision: exit %d\n%s", code, out)
		}
	})

	t.Run("diff", func(t *testing.T) {
		code, out, errOut := cli(t, "diff", "@"+before, fmt.Sprintf("@%d", deletedAt+1))
		if code != 0 || !strings.Contains(out, "- /registry/configmaps/shop/web-config") || !strings.Contains(out, "+ /app/after") ||
			!strings.Contains(errOut, "1 added, 1 deleted, 0 changed") {
			t.Errorf("diff of two points in time: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = cli(t, "diff", anchor.ID, "@"+before)
		if code != 0 || strings.Count(out, "+ /app/counter-") != 3 || !strings.Contains(errOut, "3 added, 0 deleted, 0 changed") {
			t.Errorf("diff of a backup and a point in time: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("outside the windows", func(t *testing.T) {
		code, _, errOut := cli(t, "ls", "--at-revision", "100000")
		if code != 1 || !strings.Contains(errOut, "outside every recoverable window") {
			t.Errorf("ls at a revision outside the windows: exit %d %s", code, errOut)
		}
		code, _, errOut = cli(t, "ls", "--at-revision", "5", "--at-time", "2h")
		if code != 2 {
			t.Errorf("both --at flags: exit %d %s", code, errOut)
		}
		code, _, errOut = cli(t, "get", "@yesterday", "/x")
		if code != 2 || !strings.Contains(errOut, "after @ give a revision") {
			t.Errorf("bad @ source: exit %d %s", code, errOut)
		}
	})
}
