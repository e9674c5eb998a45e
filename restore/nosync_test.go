package restore_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestSkipSyncs: under skipSyncs' filter fsync and fdatasync return
// success without running (on a pipe, where the kernel refuses both with
// EINVAL), and other calls still run (a write, a read back). The filter
// cannot be removed, so the test runs itself in a child process.
func TestSkipSyncs(t *testing.T) {
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		if err := restore.SkipSyncs(); err == nil {
			t.Fatal("skipSyncs claims a filter where it has none")
		}
		return
	}
	pipeSyncs := func() (error, error) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		defer w.Close()
		return unix.Fsync(int(w.Fd())), unix.Fdatasync(int(w.Fd()))
	}
	if os.Getenv("LIFEBOAT_TEST_SKIP_SYNCS") != "1" {
		// Without the filter the kernel refuses both on a pipe: the
		// child's nil results then prove the filter answered.
		if e1, e2 := pipeSyncs(); !errors.Is(e1, unix.EINVAL) || !errors.Is(e2, unix.EINVAL) {
			t.Fatalf("fsync, fdatasync on a pipe without the filter: %v, %v; want EINVAL", e1, e2)
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestSkipSyncs$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "LIFEBOAT_TEST_SKIP_SYNCS=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestSkipSyncs") {
			t.Fatalf("child under the filter: %v\n%s", err, out)
		}
		return
	}
	if err := restore.SkipSyncs(); err != nil {
		t.Fatal(err)
	}
	if e1, e2 := pipeSyncs(); e1 != nil || e2 != nil {
		t.Fatalf("fsync, fdatasync on a pipe under the filter: %v, %v; want nil (not run)", e1, e2)
	}
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte("still written"), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		t.Fatalf("fsync of a file under the filter: %v", err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "still written" {
		t.Fatalf("read back %q, %v", b, err)
	}
}

// TestRestoreChildSkipsSyncs: the drill's restore child is told to skip
// its syncs (the copy is deleted after the drill).
func TestRestoreChildSkipsSyncs(t *testing.T) {
	args, err := restore.RestoreChildArgs(restore.RestoreOptions{
		SnapshotPath: "s.db", DataDir: "d", Name: "m", PeerURLs: []string{restore.SocketPeerURL}, InitialClusterToken: "t",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(args, "--no-sync") {
		t.Fatalf("restore child's arguments %q lack --no-sync", args)
	}
}

// seccompMode reads the Seccomp field of /proc/PID/status: 0 none, 2 a
// filter.
func seccompMode(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Seccomp field in /proc/%d/status", pid)
	return ""
}

// TestEtcdNoSync: the drill's built-in etcd runs under skipSyncs' filter
// with NoSync, and without it otherwise (the demo's server keeps its
// syncs).
func TestEtcdNoSync(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	if runtime.GOOS != "linux" || (runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64") {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no seccomp filter for %s/%s: add its audit arch to skipSyncs (CI must not skip this)", runtime.GOOS, runtime.GOARCH)
		}
		t.Skip("skipSyncs has no filter here")
	}
	for _, tt := range []struct {
		noSync bool
		want   string
	}{{true, "2"}, {false, "0"}} {
		dir := t.TempDir()
		srv, err := restore.StartEtcd(t.Context(), restore.EtcdOptions{
			DataDir: filepath.Join(dir, "etcd"), SocketDir: filepath.Join(dir, "sock"), NoSync: tt.noSync,
		})
		if err != nil {
			t.Fatal(err)
		}
		got := seccompMode(t, srv.Pid())
		srv.Kill()
		srv.Close()
		if got != tt.want {
			t.Errorf("NoSync %v: the etcd child's Seccomp mode is %s, want %s", tt.noSync, got, tt.want)
		}
	}
}
