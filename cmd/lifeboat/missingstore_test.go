package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMissingStoreDirectory (issue 29): a read-only command given a
// file:// store that does not exist (a typo) fails with exit 2, names
// the directory and creates nothing; it used to create the directory
// and answer "no backups" with exit 0.
func TestMissingStoreDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "typo", "backups")
	for _, args := range [][]string{
		{"list"},
		{"verify", "latest"},
		{"restore", "latest", "--data-dir", filepath.Join(t.TempDir(), "d"), "--name", "m1", "--initial-advertise-peer-urls", "http://127.0.0.1:2380"},
		{"fetch", "latest", filepath.Join(t.TempDir(), "snap.db")},
		{"kit", "list"},
		{"log"},
		{"prune", "--keep-last", "3"},
	} {
		t.Run(args[0], func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, append(args, "--store", "file://"+dir, "--cluster", "prod", "--spool-dir", t.TempDir())...)
			if code != 2 || !strings.Contains(errOut, dir) || !strings.Contains(errOut, "does not exist") {
				t.Errorf("%s on a missing store: exit %d, want 2 naming %s\n%s\n%s", args[0], code, dir, out, errOut)
			}
			if _, err := os.Stat(filepath.Dir(dir)); !os.IsNotExist(err) {
				t.Errorf("%s created %s", args[0], filepath.Dir(dir))
			}
		})
	}
}

// TestNoBackupsNamesClusters (issue 29): "no backups of cluster X" also
// names the clusters the store does hold (a wrong --cluster), and
// restore, verify and drill of latest fail (exit 1), list does not.
func TestNoBackupsNamesClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	e := newDrillEnv(t) // cluster "test"
	e.snapshot(t)
	wrong := func(args ...string) (int, string, string) {
		t.Helper()
		a := append(args, e.args...)
		for i := range a {
			if a[i] == "--cluster" {
				a[i+1] = "tset"
			}
		}
		return runCLI(t, nil, a...)
	}
	code, out, errOut := wrong("list")
	if code != 0 || !strings.Contains(out, `no backups of cluster "tset"`) || !strings.Contains(out, `clusters in this store: test`) {
		t.Errorf("list of a wrong cluster: exit %d\n%s\n%s", code, out, errOut)
	}
	for _, cmd := range [][]string{{"verify", "latest"}, {"drill", "latest"}} {
		code, out, errOut := wrong(cmd...)
		if code != 1 || !strings.Contains(errOut, `clusters in this store: test`) {
			t.Errorf("%s of a wrong cluster: exit %d, want 1 naming cluster test\n%s\n%s", cmd[0], code, out, errOut)
		}
	}
}
