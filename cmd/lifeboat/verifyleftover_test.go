package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestVerifySweepsKilledVerify: `lifeboat verify ID` downloads into a
// named file in the spool dir; a verify killed with SIGKILL leaves it. The
// next verify removes the leftovers of processes that are gone, and only
// those.
func TestVerifySweepsKilledVerify(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 100)
	dir := t.TempDir()
	store, spool := filepath.Join(dir, "store"), filepath.Join(dir, "spool")
	args := []string{"--store", "file://" + store, "--spool-dir", spool, "--log-format", "json",
		"--endpoints", strings.Join(c.Endpoints(), ",")}
	if code, out, errOut := runCLI(t, nil, append([]string{"snapshot"}, args...)...); code != 0 {
		t.Fatalf("snapshot exit %d\n%s\n%s", code, out, errOut)
	}
	// A pid that is gone: a child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	dead := cmd.Process.Pid
	stale := filepath.Join(spool, "lifeboat-verify-20261201T000000Z-r5-"+strconv.Itoa(dead)+".db")
	live := filepath.Join(spool, "lifeboat-verify-20261201T000000Z-r5-"+strconv.Itoa(os.Getppid())+".db")
	other := filepath.Join(spool, "notes.txt")
	for _, p := range []string{stale, live, other} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if code, out, errOut := runCLI(t, nil, append([]string{"verify", "latest"}, args...)...); code != 0 {
		t.Fatalf("verify exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the leftover of a killed verify is still there: %v", err)
	}
	for _, p := range []string{live, other} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s (not a dead verify's) was removed: %v", filepath.Base(p), err)
		}
	}
}
