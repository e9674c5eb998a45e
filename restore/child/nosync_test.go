package child_test

import (
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore/child"
)

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
		srv, err := child.StartEtcd(t.Context(), child.EtcdOptions{
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
