package child

import (
	"errors"
	"fmt"
)

// ErrKilled is wrapped when one of a drill's child processes (its
// restore, its replay, its etcd) was killed by a signal from outside:
// SIGKILL from the kernel's or a cgroup's OOM killer, an operator or a
// supervisor. That says nothing of the backup, unlike a crash of the
// child on the data (a panic, a fatal exit, a fault of its own): the
// drill is an error of the run, never a verdict.
var ErrKilled = errors.New("killed by a signal from outside (an OOM killer, a memory limit, an operator), not a crash on the data")

// killNote says how a child ended when it was killed from outside (its
// wait error waitErr), with the OOM kills counted on this machine since
// oomBefore (oomKills at its start): "" when it was not killed.
func killNote(waitErr error, oomBefore int64) (string, bool) {
	sig, ok := killedBy(waitErr)
	if !ok {
		return "", false
	}
	note := "signal: " + sig
	if after := oomKills(); oomBefore >= 0 && after > oomBefore {
		note += fmt.Sprintf("; the OOM killer killed %d process(es) meanwhile: out of memory", after-oomBefore)
	}
	return note, true
}
