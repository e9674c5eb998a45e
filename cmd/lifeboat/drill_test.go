package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// drillEnv is a seeded etcd and the flags of a local store.
type drillEnv struct {
	c       *etcdtest.Cluster
	store   string
	scratch string
	args    []string // store, spool, cluster, logging
}

func newDrillEnv(t *testing.T) *drillEnv {
	t.Helper()
	c := etcdtest.Start(t, etcdtest.Options{})
	seedCluster(t, c, 400)
	dir := t.TempDir()
	e := &drillEnv{c: c, store: filepath.Join(dir, "store"), scratch: filepath.Join(dir, "scratch")}
	e.args = []string{"--store", "file://" + e.store, "--spool-dir", filepath.Join(dir, "spool"), "--cluster", "test",
		"--log-format", "json", "--scratch-dir", e.scratch, "--endpoints", strings.Join(c.Endpoints(), ",")}
	return e
}

func (e *drillEnv) snapshot(t *testing.T) {
	t.Helper()
	// A write first: two backups in one second need distinct revisions
	// to get distinct ids.
	if _, err := e.c.Client(t).Put(t.Context(), "/lifeboat-test/tick", t.Name()); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot"}, e.args...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
}

func (e *drillEnv) backups(t *testing.T) *repository.Repo {
	t.Helper()
	st, err := uploader.NewDir(e.store)
	if err != nil {
		t.Fatal(err)
	}
	return &repository.Repo{Store: st, Cluster: "test"}
}

func TestDrillCommand(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	e.snapshot(t)
	e.snapshot(t)
	b := e.backups(t)
	l, err := b.List(t.Context())
	if err != nil || len(l.Backups) != 2 {
		t.Fatalf("backups: %v %v", l, err)
	}
	newest, older := l.Backups[0].Manifest, l.Backups[1].Manifest

	t.Run("latest passes", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, append([]string{"drill", "--check-prefix", "/registry/namespaces/"}, e.args...)...)
		if code != 0 {
			t.Fatalf("drill exit %d\n%s\n%s", code, out, errOut)
		}
		for _, want := range []string{"drill of backup " + newest.ID + ": PASSED", "fetch", "decode", "restore", "boot", "checks", "total", "prefix /registry/namespaces/", "report stored at test/drills/" + newest.ID + "/"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		assertEmptyDir(t, e.scratch)
	})

	t.Run("random drills the older one", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, append([]string{"drill", "random", "-o", "json"}, e.args...)...)
		if code != 0 {
			t.Fatalf("drill exit %d\n%s\n%s", code, out, errOut)
		}
		var rep repository.DrillReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("drill -o json: %v\n%s", err, out)
		}
		if rep.BackupID != older.ID || !rep.Passed || len(rep.Phases) == 0 || rep.RecoverySeconds <= 0 {
			t.Errorf("report %+v, want a passed drill of %s", rep, older.ID)
		}
	})

	t.Run("a damaged object fails naming the check", func(t *testing.T) {
		path := filepath.Join(e.store, filepath.FromSlash(older.Object))
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		data[len(data)/3] ^= 0x80
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := runCLI(t, nil, append([]string{"drill", older.ID}, e.args...)...)
		if code != 1 {
			t.Fatalf("drill of a damaged backup exit %d, want 1\n%s\n%s", code, out, errOut)
		}
		if !strings.Contains(errOut, "check object sha256: expected "+older.ObjectSHA256+", actual ") {
			t.Errorf("stderr does not name the check, expected and actual:\n%s", errOut)
		}
		if !strings.Contains(out, "FAILED") {
			t.Errorf("output:\n%s", out)
		}
		assertEmptyDir(t, e.scratch)
	})

	t.Run("list shows the verdicts", func(t *testing.T) {
		code, out, errOut := runCLI(t, nil, append([]string{"list"}, e.args...)...)
		if code != 0 {
			t.Fatalf("list exit %d\n%s", code, errOut)
		}
		for _, line := range strings.Split(out, "\n") {
			switch {
			case strings.HasPrefix(line, newest.ID) && !strings.Contains(line, "passed "):
				t.Errorf("newest backup not shown as passed: %q", line)
			case strings.HasPrefix(line, older.ID) && !strings.Contains(line, "FAILED "):
				t.Errorf("damaged backup not shown as failed: %q", line)
			}
		}
		code, out, _ = runCLI(t, nil, append([]string{"list", "-o", "json"}, e.args...)...)
		if code != 0 {
			t.Fatal(out)
		}
		var res listOutput
		if err := json.Unmarshal([]byte(out), &res); err != nil {
			t.Fatal(err)
		}
		got := map[string]bool{}
		for _, b := range res.Backups {
			if b.LastDrill == nil {
				t.Fatalf("no last_drill for %s", b.ID)
			}
			got[b.ID] = b.LastDrill.Passed
		}
		if !got[newest.ID] || got[older.ID] {
			t.Errorf("last drill verdicts %v", got)
		}
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{{"drill", "a", "b"}, {"drill", "-o", "yaml"}, {"drill", "yesterday"}} {
			if code, _, errOut := runCLI(t, nil, append(args, e.args...)...); code != 2 {
				t.Errorf("%v: exit %d, want 2 (%s)", args, code, errOut)
			}
		}
	})
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%s not empty: %v", dir, entries)
	}
}

// TestDrillRunErrorStoresNoReport: a drill that cannot run to a verdict
// (here: an encrypted backup and no identity) exits 2 and stores no
// report, so the backup does not read as FAILED.
func TestDrillRunErrorStoresNoReport(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot", "--recipient", id.Recipient().String()}, e.args...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
	code, out, errOut := runCLI(t, nil, append([]string{"drill"}, e.args...)...)
	// Exit 2: the keys given cannot decrypt it, as everywhere (issue 29).
	if code != 2 {
		t.Fatalf("drill without an identity: exit %d, want 2\n%s\n%s", code, out, errOut)
	}
	if !strings.Contains(errOut, "could not run, no report stored") {
		t.Errorf("stderr does not say the drill could not run:\n%s", errOut)
	}
	// One verdict, in words (issue 29): no "FAILED ... 0.00s" before it.
	if strings.Contains(out, "FAILED") || !strings.Contains(out, ": COULD NOT RUN (no verdict on the backup)") {
		t.Errorf("stdout of a drill that could not run:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(e.store, "test", "drills")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a drill report was stored for a run error: %v", storeFiles(t, filepath.Join(e.store, "test")))
	}
	assertEmptyDir(t, e.scratch)
}
