//go:build linux || darwin

package child

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// crashSignals are the signals a process gets from its own faults (or
// sends itself to abort, as the Go runtime does with GOTRACEBACK=crash):
// a death by one of them is a crash of the child, not a kill.
var crashSignals = map[syscall.Signal]bool{
	syscall.SIGSEGV: true, syscall.SIGBUS: true, syscall.SIGILL: true, syscall.SIGFPE: true,
	syscall.SIGABRT: true, syscall.SIGTRAP: true, syscall.SIGSYS: true,
}

// killedBy returns the name of the signal that killed a child, from its
// wait error, when it was one sent from outside (SIGKILL, SIGTERM…).
func killedBy(waitErr error) (string, bool) {
	var ee *exec.ExitError
	if !errors.As(waitErr, &ee) {
		return "", false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || crashSignals[ws.Signal()] {
		return "", false
	}
	return ws.Signal().String(), true
}

// oomKills is the count of processes the kernel's OOM killer (global or
// a cgroup's) has killed since boot (oom_kill in /proc/vmstat, Linux
// 4.13 on), or -1 when unknown: a hint, in a killed child's error, that
// memory ran out.
func oomKills() int64 {
	f, err := os.Open("/proc/vmstat")
	if err != nil {
		return -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			return n
		}
	}
	return -1
}
