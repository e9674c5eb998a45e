package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/repository"
)

func newSnapshotCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "snapshot",
		Short: "Take one backup now: snapshot, verify, encode, store",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.uploadConfig()
			if err != nil {
				return err
			}
			_, err = runSnapshot(cmd.Context(), cfg, a.logger(cfg), a.stdout)
			return err
		},
	}
}

// runSnapshot takes one backup as cfg says and prints its summary.
func runSnapshot(ctx context.Context, cfg *Config, lg *slog.Logger, out io.Writer) (*repository.Manifest, error) {
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
	m, err := backup.Run(ctx, *snapshotJob(cfg, backups, enc), lg)
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
	}
	fmt.Fprintf(out, "  object     %s\n", m.Object)
	fmt.Fprintf(out, "  took       %.1fs\n", m.DurationSeconds)
}
