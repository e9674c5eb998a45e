package drill_test

import (
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/child"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
)

// TestDrillChildKilled: a drill's child process killed with SIGKILL (what
// the kernel's or a cgroup's OOM killer does, or an operator) is an error
// of the run, not a verdict on the backup: the drill's restore child, its
// etcd while it boots and while it serves the checks. Drill's error is no
// verdict and wraps ErrKilled, the report says why and holds no failed
// check as the verdict, RunJob stores no report and marks the
// outcome RunError; this process goes on, and the next drill passes.
func TestDrillChildKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("real etcd")
	}
	ctx := t.Context()
	src := restoretest.StartSource(t, 200)
	b := restoretest.DirRepo(t, t.TempDir())
	m := src.Backup(t, b, repository.Encoding{Compression: "zstd"})
	kill := func(t *testing.T, pid int) {
		t.Helper()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
	}
	for _, tc := range []struct {
		name  string
		child string // the hidden command of the child killed as it starts ("": the etcd, once booted)
	}{
		{name: "restore child", child: child.RestoreCommand},
		{name: "etcd at boot", child: child.EtcdCommand},
		{name: "etcd during the checks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hit bool
			o := drill.Options{Backups: b, Manifest: m, ScratchDir: t.TempDir(), Version: "test"}
			if tc.child != "" {
				restoretest.OnChildStarted(t, func(cmd *exec.Cmd) {
					if !hit && len(cmd.Args) > 1 && cmd.Args[1] == tc.child {
						hit = true
						kill(t, cmd.Process.Pid)
					}
				})
			} else {
				o.OnBoot = func(srv *child.Etcd) {
					hit = true
					kill(t, srv.Pid())
				}
			}
			out, err := drill.RunJob(ctx, drill.Job{Backups: b, Target: m.ID, Options: o}, nil)
			if !hit {
				t.Fatal("the child was not killed")
			}
			if err == nil || drill.Verdict(err) || errors.Is(err, drill.ErrFailed) || !errors.Is(err, child.ErrKilled) {
				t.Fatalf("drill with its %s killed: %v, want an error of the run wrapping ErrKilled", tc.name, err)
			}
			if !strings.Contains(err.Error(), "signal: killed") {
				t.Errorf("error does not say the child was killed: %v", err)
			}
			if out == nil || !out.RunError || out.Passed || out.Error == "" {
				t.Errorf("outcome %+v, want RunError", out)
			}
			last, lerr := b.LastDrills(ctx)
			if lerr != nil || last[m.ID] != nil {
				t.Errorf("a report was stored for a drill whose child was killed: %+v %v", last[m.ID], lerr)
			}
			t.Logf("killed: %v", err)
			restoretest.AssertEmpty(t, o.ScratchDir)
			restoretest.OnChildStarted(t, nil)
			o.OnBoot = nil
			if rep, err := drill.Run(ctx, o); err != nil || !rep.Passed {
				t.Fatalf("the next drill: %v", err)
			}
		})
	}
}
