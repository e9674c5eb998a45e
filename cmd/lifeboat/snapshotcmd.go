package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

func newSnapshotCmd(a *app) *cobra.Command {
	var skip bool
	c := &cobra.Command{
		Use:   "snapshot",
		Short: "Take one backup now: snapshot, verify, encode, store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.uploadConfig()
			if err != nil {
				return err
			}
			_, err = runSnapshotSkip(cmd.Context(), cfg, a.logger(cfg), a.stdout, skip)
			return err
		},
	}
	c.Flags().BoolVar(&skip, "skip-unchanged", false,
		"store nothing when every member is at the newest backup's revision with its HashKV (exit 0, saying so)")
	return c
}

// runSnapshot takes one backup as cfg says and prints its summary.
func runSnapshot(ctx context.Context, cfg *Config, lg *slog.Logger, out io.Writer) (*repository.Manifest, error) {
	return runSnapshotSkip(ctx, cfg, lg, out, false)
}

// runSnapshotSkip is runSnapshot; with skipUnchanged, a cluster unchanged
// since its newest backup is checked and reported, and the newest
// backup's manifest returned.
func runSnapshotSkip(ctx context.Context, cfg *Config, lg *slog.Logger, out io.Writer, skipUnchanged bool) (*repository.Manifest, error) {
	backups, err := createBackups(ctx, cfg, lg)
	if err != nil {
		return nil, err
	}
	enc, err := encodingFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	if cfg.Snapshot.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Snapshot.Timeout)
		defer cancel()
	}
	job := snapshotJob(cfg, backups, enc)
	job.SkipUnchanged = skipUnchanged
	m, err := backup.Run(ctx, *job, lg)
	var ue *backup.UnchangedError
	if errors.As(err, &ue) {
		fmt.Fprintf(out, "cluster unchanged since backup %s (revision %d, HashKV %08x on %d members): not stored again\n",
			ue.Backup.ID, ue.Backup.Revision, ue.Backup.HashKV, ue.Members)
		return ue.Backup, nil
	}
	if err != nil {
		return nil, fmt.Errorf("backup not taken: %w", err)
	}
	printBackup(out, m)
	return m, nil
}

func printBackup(out io.Writer, m *repository.Manifest) {
	fmt.Fprintf(out, "backup %s stored\n", m.ID)
	fmt.Fprintf(out, "  from       %s (member %s, etcd %s)\n", m.Endpoint, m.EtcdMemberName, m.EtcdVersion)
	fmt.Fprintf(out, "  revision   %d (compacted at %d), %d keys\n", m.Revision, m.CompactRevision, m.TotalKeys)
	fmt.Fprintf(out, "  size       %s raw, %s stored (%s, encryption %s)\n", units.Bytes(m.DBSize), units.Bytes(m.ObjectSize), m.Compression, m.Encryption)
	fmt.Fprintf(out, "  verified   sha256 trailer, bbolt check, bolt hash %08x, hashkv %s\n", m.BoltHash, m.HashKVStatus)
	if m.HashKVEndpoint != "" {
		fmt.Fprintf(out, "  hashkv of  %s (member %s)", m.HashKVEndpoint, m.HashKVMember)
		if m.HashKVSameMember != "" {
			fmt.Fprintf(out, ", the snapshot's own: %s", m.HashKVSameMember)
		}
		fmt.Fprintln(out)
		if snapshot.SelfCompared(m.HashKVSameMember) {
			fmt.Fprintf(out, "  warning: %s: member divergence not checked\n", backup.SelfComparedWarning)
		}
	}
	fmt.Fprintf(out, "  object     %s\n", m.Object)
	fmt.Fprintf(out, "  took       %.1fs\n", m.DurationSeconds)
}
