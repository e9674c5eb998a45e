package backup

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lifeboat-dev/lifeboat/internal/sysfilter"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// denySetpriority installs a seccomp filter on every thread of the process
// that fails setpriority(2) with EPERM, as the systemd unit's
// SystemCallFilter does when it does not allow the call.
func denySetpriority(t *testing.T) {
	t.Helper()
	if !sysfilter.Supported {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no seccomp filter for %s in this test: add its audit arch to internal/sysfilter (CI must not skip it)", runtime.GOARCH)
		}
		t.Skipf("no seccomp filter for %s in this test", runtime.GOARCH)
	}
	if err := sysfilter.Answer([]uintptr{unix.SYS_SETPRIORITY}, unix.EPERM); err != nil {
		t.Fatal(err)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 10); err != unix.EPERM {
		t.Fatalf("setpriority under the filter: %v, want EPERM", err)
	}
}

// TestPriorityRefusedWarnsOnce: when the seccomp filter refuses
// setpriority (a unit without it in SystemCallFilter), backups still
// succeed and the process logs one warning that says what to allow, not
// one per backup. The filter cannot be removed again, so the test runs
// itself in a child process.
func TestPriorityRefusedWarnsOnce(t *testing.T) {
	if os.Getenv("LIFEBOAT_TEST_DENY_SETPRIORITY") != "1" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestPriorityRefusedWarnsOnce$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "LIFEBOAT_TEST_DENY_SETPRIORITY=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestPriorityRefusedWarnsOnce") {
			t.Fatalf("child under a seccomp filter: %v\n%s", err, out)
		}
		return
	}
	denySetpriority(t)
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	if _, err := c.Client(t).Put(t.Context(), "/registry/namespaces/default", "x"); err != nil {
		t.Fatal(err)
	}
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	lg, logs := jobtest.Logger(t)
	for i := range 2 {
		at := time.Date(2026, 12, 1, 8, 0, i, 0, time.UTC)
		job := Job{
			Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second},
			SpoolDir: filepath.Join(t.TempDir(), "spool"),
			Backups:  &repository.Repo{Store: st, Cluster: jobtest.Cluster},
			Encoding: repository.Encoding{Compression: "zstd"},
			Now:      func() time.Time { return at },
		}
		if _, err := Run(t.Context(), job, lg); err != nil {
			t.Fatalf("snapshot %d: %v", i+1, err)
		}
	}
	out := logs.String()
	if n := strings.Count(out, "level=WARN msg=\"cannot lower the compression thread's priority"); n != 1 {
		t.Errorf("%d warnings about the refused setpriority in two backups, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "SystemCallFilter") || !strings.Contains(out, "operation not permitted") {
		t.Errorf("the warning does not say what to allow and why:\n%s", out)
	}
}
