package main

import (
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// The hidden commands a drill (and restore --dry-run, and the demo) runs
// this binary with, each in a process of its own, so that etcd's code
// there (a server, etcdutl's restore, the mvcc store of a replay) runs
// without the parent's soft memory limit and a panic or fatal exit of it
// on restored data takes only that process down. They take what the
// restore and restore/child packages pass them; they are no interface
// for people.

// newEtcdCmd runs a drill's throwaway etcd (child.EtcdCommand) with
// etcd's flags as child.StartEtcd passes them.
func newEtcdCmd(a *app) *cobra.Command {
	return hiddenChildCmd(child.EtcdCommand, "Run a drill's throwaway etcd (internal)", func(cmd *cobra.Command, args []string) error {
		return child.RunEtcd(cmd.Context(), args, a.stderr)
	})
}

// newRestoreChildCmd restores a drill's member (child.RestoreCommand):
// etcdutl writes the restored database and WAL (or, --in-place, the
// database is written where it lies when stdin says so). It prints its error on a
// line the parent reads back (and, as every command, once more as
// lifeboat's error) and exits 1.
func newRestoreChildCmd(a *app) *cobra.Command {
	return hiddenChildCmd(child.RestoreCommand, "Restore a drill's member (internal)", func(cmd *cobra.Command, args []string) error {
		return restore.RunRestore(cmd.Context(), args, cmd.InOrStdin(), a.stderr)
	})
}

// newReplayChildCmd replays a drill's captured changes onto its snapshot
// (child.ReplayCommand), fed the decoded segments on stdin by the drill:
// it gets no store, no credentials, no identity. It prints its result and
// error lines for the parent and exits 1 on failure.
func newReplayChildCmd(a *app) *cobra.Command {
	return hiddenChildCmd(child.ReplayCommand, "Replay a drill's captured changes (internal)", func(cmd *cobra.Command, args []string) error {
		return restore.RunReplay(cmd.Context(), args, cmd.InOrStdin(), a.stderr)
	})
}

// hiddenChildCmd is a hidden command that takes its arguments unparsed.
func hiddenChildCmd(use, short string, run func(cmd *cobra.Command, args []string) error) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Hidden: true, DisableFlagParsing: true, RunE: run}
}
