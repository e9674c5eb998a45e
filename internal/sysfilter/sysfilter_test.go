package sysfilter

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// pipeSyncs calls fsync and fdatasync on a pipe, which the kernel refuses
// with EINVAL: a nil result means the filter answered instead.
func pipeSyncs(t *testing.T) (error, error) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	return unix.Fsync(int(w.Fd())), unix.Fdatasync(int(w.Fd()))
}

// TestAnswer: under a filter answering SyncCalls with 0, fsync and
// fdatasync return success without running, and other calls still run
// (a file written, synced and read back); a call answered with EPERM
// fails with EPERM. The filter cannot be removed, so the test runs
// itself in a child process.
func TestAnswer(t *testing.T) {
	if !Supported {
		if err := Answer(SyncCalls, 0); err == nil {
			t.Fatal("Answer claims a filter where it has none")
		}
		if os.Getenv("CI") == "true" {
			t.Fatal("no seccomp filter on this platform: CI must not skip this test")
		}
		t.Skip("no seccomp filter on this platform")
	}
	if os.Getenv("LIFEBOAT_TEST_SYSFILTER") != "1" {
		if e1, e2 := pipeSyncs(t); !errors.Is(e1, unix.EINVAL) || !errors.Is(e2, unix.EINVAL) {
			t.Fatalf("fsync, fdatasync on a pipe without the filter: %v, %v; want EINVAL", e1, e2)
		}
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAnswer$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), "LIFEBOAT_TEST_SYSFILTER=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestAnswer") {
			t.Fatalf("child under the filter: %v\n%s", err, out)
		}
		return
	}
	if err := Answer(SyncCalls, 0); err != nil {
		t.Fatal(err)
	}
	if err := Answer([]uintptr{unix.SYS_SETPRIORITY}, unix.EPERM); err != nil {
		t.Fatal(err)
	}
	if e1, e2 := pipeSyncs(t); e1 != nil || e2 != nil {
		t.Fatalf("fsync, fdatasync on a pipe under the filter: %v, %v; want nil (not run)", e1, e2)
	}
	if err := unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 10); !errors.Is(err, unix.EPERM) {
		t.Fatalf("setpriority under the filter: %v, want EPERM", err)
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
