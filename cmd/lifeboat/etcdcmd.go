package main

import (
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// newEtcdCmd is the hidden command a drill (and restore --dry-run, and the
// demo) starts its throwaway etcd with: this binary, in a process of its
// own, so that an etcd that panics on restored data takes only itself down
// and runs without the parent's soft memory limit. It takes etcd's flags
// as restore.StartEtcd passes them; it is no interface for people.
func newEtcdCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                restore.EtcdCommand,
		Short:              "Run a drill's throwaway etcd (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return restore.RunEtcd(cmd.Context(), args, a.stderr)
		},
	}
}

// newRestoreChildCmd is the hidden command a drill restores its member
// with (restore.RestoreCommand): this binary in a process of its own, so
// that etcdutl writes the restored database and WAL without the parent's
// soft memory limit. It prints its error on a line the parent reads back
// (and, as every command, once more as lifeboat's error) and exits 1; it
// is no interface for people.
func newRestoreChildCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                restore.RestoreCommand,
		Short:              "Restore a drill's member (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return restore.RunRestore(cmd.Context(), args, a.stderr)
		},
	}
}

// newReplayChildCmd is the hidden command a drill replays captured changes
// with (restore.ReplayCommand): this binary in a process of its own, fed
// the decoded segments on stdin by the drill (it gets no store, no
// credentials, no identity), so that etcd's mvcc code runs without the
// daemon's soft memory limit and a panic there ends only this process. It
// prints its result and error lines for the parent (and, as every
// command, its error once more as lifeboat's) and exits 1 on failure; it
// is no interface for people.
func newReplayChildCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:                restore.ReplayCommand,
		Short:              "Replay a drill's captured changes (internal)",
		Hidden:             true,
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return restore.RunReplay(cmd.Context(), args, cmd.InOrStdin(), a.stderr)
		},
	}
}
