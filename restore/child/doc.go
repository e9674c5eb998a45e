// Package child runs lifeboat's child processes: this binary started
// again with one of its hidden commands, so that etcd's code there (a
// server, etcdutl's restore, the mvcc store of a replay) runs without the
// parent's soft memory limit, and a panic or fatal exit of it on restored
// data takes only that process down.
//
// StartEtcd starts a throwaway single-member etcd (EtcdCommand, running
// RunEtcd, or an external etcd binary) for drills, restore --dry-run and
// the demo, on unix sockets in a private directory or on loopback TCP.
// Start and Process.Wait run a one-shot child (the restore's
// RestoreCommand and the replay's ReplayCommand) and read back how it
// ended: its error line (WriteErrorLine on the child's side) as an error
// with the same text, or a *Crash when it ended without one. Every child
// gets the parent's environment without Go runtime tuning, etcd
// configuration or credentials, dies with the parent (Pdeathsig on
// Linux), and may skip its syncs (NoSyncFlag, SkipSyncsIf) when its data
// is thrown away. A child killed by a signal from outside (an OOM killer,
// an operator) wraps ErrKilled: that says nothing of the data, unlike a
// crash. Main dispatches the hidden commands in this binary's main and in
// a test binary's TestMain.
//
// What the restore and replay children do is package restore's
// (restore.ChildWork), passed to Main: this package needs nothing of it.
package child
