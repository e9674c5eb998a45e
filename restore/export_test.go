package restore

import (
	"os/exec"
	"testing"
)

// RestoreInChild is restoreInChild, for the tests of restore_test.
var RestoreInChild = restoreInChild

// ReplayInChild is replayInChild, for the tests of restore_test.
var ReplayInChild = replayInChild

// OnChildStarted has f called with each drill child process (restore,
// replay, etcd) right after it started, until the test ends. Tests
// that use it must not run in parallel with other drills.
func OnChildStarted(t testing.TB, f func(*exec.Cmd)) {
	childStarted = f
	t.Cleanup(func() { childStarted = nil })
}

// RestoreChildArgs is restoreChildArgs, for the tests of restore_test.
var RestoreChildArgs = restoreChildArgs
