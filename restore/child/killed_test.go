//go:build linux || darwin

package child

import (
	"errors"
	"os/exec"
	"testing"
)

// TestKilledBy: a child killed by a signal from outside (SIGKILL, as the
// OOM killer sends, or SIGTERM) is a kill; one that dies of a fault or
// aborts itself (SIGSEGV, SIGABRT), or exits with a status, is a crash.
func TestKilledBy(t *testing.T) {
	for _, tc := range []struct {
		name, script, wantSig string
		killed                bool
	}{
		{"sigkill", "kill -KILL $$", "killed", true},
		{"sigterm", "kill -TERM $$", "terminated", true},
		{"abort", "kill -ABRT $$", "", false},
		{"segfault", "kill -SEGV $$", "", false},
		{"exit status", "exit 2", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := exec.Command("sh", "-c", tc.script).Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatalf("sh -c %q: %v, want an exit error", tc.script, err)
			}
			sig, killed := killedBy(err)
			if sig != tc.wantSig || killed != tc.killed {
				t.Errorf("killedBy(%v) = %q, %v; want %q, %v", err, sig, killed, tc.wantSig, tc.killed)
			}
			note, killed := killNote(err, -1)
			if killed != tc.killed || (killed && note != "signal: "+tc.wantSig) {
				t.Errorf("killNote = %q, %v", note, killed)
			}
		})
	}
	if _, killed := killedBy(nil); killed {
		t.Error("killedBy(nil): killed")
	}
	if _, killed := killNote(errors.New("not an exit"), 0); killed {
		t.Error("killNote of another error: killed")
	}
	if n := oomKills(); n < -1 {
		t.Errorf("oomKills() = %d", n)
	}
}
