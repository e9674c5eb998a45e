package main

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/storage/backend"
	"go.etcd.io/etcd/server/v3/storage/mvcc"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/changetest"
	"github.com/lifeboat-dev/lifeboat/restore"
)

func TestRestorePointInTime(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	e := newDrillEnv(t)
	e.snapshot(t)
	repo := e.backups(t)
	l, err := repo.List(ctx)
	if err != nil || len(l.Backups) != 1 {
		t.Fatalf("backups: %v %v", l, err)
	}
	anchor := l.Backups[0].Manifest
	cli := e.c.Client(t)
	c := changetest.Start(t, changetest.Options{Client: cli, Repo: repo, Anchor: anchor, SegmentRevisions: 3})
	for i := range 12 {
		if _, err := cli.Put(ctx, fmt.Sprintf("/pitr/k%d", i%5), fmt.Sprintf("v%d", i)); err != nil {
			t.Fatal(err)
		}
		if i%4 == 3 {
			if _, err := cli.Delete(ctx, fmt.Sprintf("/pitr/k%d", i%5)); err != nil {
				t.Fatal(err)
			}
		}
	}
	through := c.Sync(t)
	target := anchor.Revision + (through-anchor.Revision)/2
	want, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(target))
	if err != nil {
		t.Fatal(err)
	}
	args := func(extra ...string) []string { return append(append([]string{"restore"}, extra...), e.args...) }
	peer := []string{"--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"}

	t.Run("to revision", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		setMemoryLimit(0) // as any earlier command left it
		code, out, errOut := runCLI(t, nil, args(append([]string{"--to-revision", fmt.Sprint(target), "--data-dir", dir}, peer...)...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		// The replay's live heap (etcd's key index of the whole keyspace)
		// is far above lifeboat's soft limit: under it the GC runs without
		// end (4 438 vs 16 276 revisions/s onto the 1 GiB bench base).
		// A point-in-time restore runs without it.
		if lim := debug.SetMemoryLimit(-1); os.Getenv("GOMEMLIMIT") == "" && lim != math.MaxInt64 {
			t.Errorf("soft memory limit %d MiB after a point-in-time restore; want none", lim>>20)
		}
		gc := debug.SetGCPercent(100)
		if os.Getenv("GOGC") == "" && gc != restore.ReplayGCPercent {
			t.Errorf("GC percent %d after a point-in-time restore; want %d", gc, restore.ReplayGCPercent)
		}
		for _, s := range []string{"snapshot " + anchor.ID, fmt.Sprintf("%d revisions", target-anchor.Revision), "/changes/" + anchor.ID + "/", fmt.Sprintf("replayed %d revisions", target-anchor.Revision)} {
			if !strings.Contains(out, s) {
				t.Errorf("output lacks %q:\n%s", s, out)
			}
		}
		lg := zap.NewNop()
		be := backend.NewDefaultBackend(lg, filepath.Join(dir, "member", "snap", "db"))
		kv := mvcc.NewStore(lg, be, nil, mvcc.StoreConfig{})
		defer func() { kv.Close(); be.Close() }()
		if kv.Rev() != target {
			t.Errorf("restored revision %d, want %d", kv.Rev(), target)
		}
		res, err := kv.Range(ctx, []byte{0}, []byte{}, mvcc.RangeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.KVs) != len(want.Kvs) {
			t.Fatalf("%d keys restored, the source had %d at %d", len(res.KVs), len(want.Kvs), target)
		}
		for i, g := range res.KVs {
			w := want.Kvs[i]
			if !bytes.Equal(g.Key, w.Key) || !bytes.Equal(g.Value, w.Value) || g.ModRevision != w.ModRevision || g.CreateRevision != w.CreateRevision || g.Version != w.Version {
				t.Fatalf("key %q: restored %+v, source %+v", g.Key, g, w)
			}
		}
	})

	t.Run("bump revision", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, args(append([]string{"--to-revision", fmt.Sprint(target), "--data-dir", dir, "--bump-revision", "1000", "--mark-compacted"}, peer...)...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		lg := zap.NewNop()
		be := backend.NewDefaultBackend(lg, filepath.Join(dir, "member", "snap", "db"))
		kv := mvcc.NewStore(lg, be, nil, mvcc.StoreConfig{})
		defer func() { kv.Close(); be.Close() }()
		if kv.Rev() != target+1000 {
			t.Errorf("restored revision %d, want %d", kv.Rev(), target+1000)
		}
		res, err := kv.Range(ctx, []byte{0}, []byte{}, mvcc.RangeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.KVs) != len(want.Kvs) {
			t.Errorf("%d keys restored, the source had %d at %d", len(res.KVs), len(want.Kvs), target)
		}
	})

	t.Run("to time", func(t *testing.T) {
		ws, err := repo.Windows(ctx, l)
		if err != nil || len(ws) != 1 {
			t.Fatalf("windows: %v %v", ws, err)
		}
		at := ws[0].ThroughTime.UTC().Format(time.RFC3339Nano)
		code, out, errOut := runCLI(t, nil, args("--to-time", at, "--dry-run")...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("is revision %d", through)) || !strings.Contains(out, fmt.Sprintf("replayed %d revisions", through-anchor.Revision)) {
			t.Fatalf("--to-time %s: exit %d\n%s\n%s", at, code, out, errOut)
		}
	})

	t.Run("drill to revision", func(t *testing.T) {
		// lifeboat drill --to-revision: replayed, booted, and compared
		// with the live etcd's HashKV at the target.
		code, out, errOut := runCLI(t, nil, append([]string{"drill", "--to-revision", fmt.Sprint(target)}, e.args...)...)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		for _, s := range []string{fmt.Sprintf("drill of revision %d (backup %s + changes): PASSED", target, anchor.ID),
			fmt.Sprintf("replayed %d revisions", target-anchor.Revision), fmt.Sprintf("hashkv at %d: live 0x", target), "replay ", "report stored at"} {
			if !strings.Contains(out, s) {
				t.Errorf("output lacks %q:\n%s", s, out)
			}
		}
		code, out, errOut = runCLI(t, nil, append([]string{"drill", "--to-revision", fmt.Sprint(through), "-o", "json"}, e.args...)...)
		if code != 0 || !strings.Contains(out, `"point_in_time"`) || !strings.Contains(out, fmt.Sprintf(`"target_revision": %d`, through)) {
			t.Fatalf("drill -o json: exit %d\n%s\n%s", code, out, errOut)
		}
		// --to-time resolves like restore --to-time.
		ws, err := repo.Windows(ctx, l)
		if err != nil || len(ws) != 1 {
			t.Fatalf("windows: %v %v", ws, err)
		}
		at := ws[0].ThroughTime.UTC().Format(time.RFC3339Nano)
		code, out, errOut = runCLI(t, nil, append([]string{"drill", "--to-time", at}, e.args...)...)
		if code != 0 || !strings.Contains(out, fmt.Sprintf("drill of revision %d", through)) || !strings.Contains(out, "PASSED") {
			t.Fatalf("drill --to-time %s: exit %d\n%s\n%s", at, code, out, errOut)
		}
		// list names the point in time the snapshot's last drill proved.
		if code, out, _ := runCLI(t, nil, append([]string{"list"}, e.args...)...); code != 0 || !strings.Contains(out, fmt.Sprintf("passed to r%d", through)) {
			t.Errorf("list: exit %d, no \"passed to r%d\":\n%s", code, through, out)
		}
		// A backup id with a target is a usage error.
		if code, _, errOut := runCLI(t, nil, append([]string{"drill", "latest", "--to-revision", fmt.Sprint(target)}, e.args...)...); code != 2 {
			t.Errorf("drill latest --to-revision: exit %d, want 2\n%s", code, errOut)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "etcd")
		code, out, errOut := runCLI(t, nil, args(append([]string{"--to-revision", fmt.Sprint(through), "--dry-run", "--data-dir", dir}, peer...)...)...)
		if code != 0 || !strings.Contains(out, "dry run") || !strings.Contains(out, fmt.Sprintf("replayed %d revisions", through-anchor.Revision)) {
			t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("dry run wrote %s: %v", dir, err)
		}
	})

	window := fmt.Sprintf("revisions %d-%d", anchor.Revision, through)
	for _, tc := range []struct {
		name  string
		flags []string
		code  int
		say   []string
	}{
		{"before the first snapshot", []string{"--to-revision", fmt.Sprint(anchor.Revision - 1)}, 1, []string{"before the first snapshot", window, anchor.ID}},
		{"after captured-through", []string{"--to-revision", fmt.Sprint(through + 1)}, 1, []string{"after the captured-through point", window}},
		{"time after captured-through", []string{"--to-time", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)}, 1, []string{"after the captured-through point", window}},
		{"unparseable time", []string{"--to-time", "yesterday"}, 2, []string{"RFC 3339"}},
		{"both", []string{"--to-revision", "5", "--to-time", "2026-11-30T11:00:00Z"}, 2, []string{"mutually exclusive"}},
		{"negative revision", []string{"--to-revision", "-3"}, 2, []string{"revisions start at 1"}},
		{"zero revision", []string{"--to-revision", "0"}, 2, []string{"revisions start at 1"}},
		{"with a backup id", []string{anchor.ID, "--to-revision", fmt.Sprint(target)}, 2, []string{"no backup id"}},
		{"with --before", []string{"--before", "1h", "--to-revision", fmt.Sprint(target)}, 2, []string{"no backup id"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, "etcd")
			code, out, errOut := runCLI(t, nil, args(append(append(tc.flags, "--data-dir", dir), peer...)...)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\n%s\n%s", code, tc.code, out, errOut)
			}
			for _, s := range tc.say {
				if !strings.Contains(errOut, s) {
					t.Errorf("error lacks %q:\n%s", s, errOut)
				}
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Errorf("a refused restore wrote %v", entries)
			}
			if spool, _ := os.ReadDir(e.args[3]); len(spool) != 0 {
				t.Errorf("spool dir not empty: %v", spool)
			}
		})
	}
}
