package child_test

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// TestEtcdChildEnvironment: the throwaway etcd does not inherit the
// parent's Go runtime tuning (lifeboat's soft memory limit is sized for
// its own buffers), etcd's ETCD_* configuration, or credentials.
func TestEtcdChildEnvironment(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	if _, err := os.Stat("/proc/self/environ"); err != nil {
		t.Skip("needs /proc")
	}
	for k, v := range map[string]string{
		"GOMEMLIMIT": "40MiB", "GOGC": "25", "ETCD_QUOTA_BACKEND_BYTES": "1", "AWS_SECRET_ACCESS_KEY": "s3cr3t",
		"ETCDCTL_PASSWORD": "s3cr3t", "LIFEBOAT_STORE_URL": "s3://bucket/x",
	} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	srv, err := child.StartEtcd(t.Context(), child.EtcdOptions{DataDir: filepath.Join(dir, "etcd"), SocketDir: filepath.Join(dir, "sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(srv.Pid()), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(env), "\x00") {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case k == "GOMEMLIMIT", k == "GOGC", strings.HasPrefix(k, "ETCD"), strings.HasPrefix(k, "AWS_"), strings.HasPrefix(k, "LIFEBOAT_"):
			t.Errorf("the etcd child inherited %s", k)
		}
	}
}

// TestEtcdDeepSocketDir: a socket directory too deep for a unix socket
// path (108 bytes) still works: the server binds relative to its working
// directory and this process dials through a descriptor of it.
func TestEtcdDeepSocketDir(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	srv, err := child.StartEtcd(t.Context(), child.EtcdOptions{DataDir: filepath.Join(dir, "etcd"), SocketDir: filepath.Join(dir, "sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{srv.ClientURL}, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "k", "v"); err != nil {
		t.Fatalf("put through %s: %v", srv.ClientURL, err)
	}
	if _, err := cli.HashKV(t.Context(), srv.ClientURL, 0); err != nil {
		t.Fatalf("HashKV through %s: %v", srv.ClientURL, err)
	}
}

// TestEtcdShortElection: the throwaway etcd runs with a 10 ms heartbeat
// and a 100 ms election timeout. It has no peers, so no timeout can cause
// a leader change; with etcd's defaults (100 ms, 1 s) a single member
// waits 0.1–1.1 s for its first election after loading the data, which
// is most of the boot phase on a small database.
func TestEtcdShortElection(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	if _, err := os.Stat("/proc/self/cmdline"); err != nil {
		t.Skip("needs /proc")
	}
	dir := t.TempDir()
	srv, err := child.StartEtcd(t.Context(), child.EtcdOptions{DataDir: filepath.Join(dir, "etcd"), SocketDir: filepath.Join(dir, "sock")})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(srv.Pid()), "cmdline"))
	if err != nil {
		t.Fatal(err)
	}
	args := strings.Split(strings.TrimSuffix(string(raw), "\x00"), "\x00")
	got := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "--") {
			got[args[i]] = args[i+1]
		}
	}
	for flag, want := range map[string]string{"--heartbeat-interval": "10", "--election-timeout": "100"} {
		if got[flag] != want {
			t.Errorf("etcd child %s = %q, want %q (args %q)", flag, got[flag], want, args)
		}
	}
}

// TestEtcdKill: Kill stops the server at once and waits for it; it is
// not reported as a crash, and Close after it does nothing.
func TestEtcdKill(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	dir := t.TempDir()
	srv, err := child.StartEtcd(t.Context(), child.EtcdOptions{DataDir: filepath.Join(dir, "etcd"), SocketDir: filepath.Join(dir, "sock")})
	if err != nil {
		t.Fatal(err)
	}
	pid := srv.Pid()
	srv.Kill()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("etcd child %d after Kill: signal 0 gave %v, want ESRCH (gone)", pid, err)
	}
	if err := srv.Exited(); err != nil {
		t.Errorf("Exited after Kill = %v, want nil (stopped, not crashed)", err)
	}
	srv.Close()
}
