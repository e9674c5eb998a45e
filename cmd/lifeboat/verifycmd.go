package main

import (
	"context"
	"filippo.io/age"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/verify"
)

func newVerifyCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "verify ID|latest|latest-proven|FILE",
		Short: "Check a stored backup (object sha256, decryption, decompression, trailer, bbolt, status against the manifest) or a local snapshot file",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runVerify(cmd.Context(), cfg, a.logger(cfg), args[0], a.stdout)
		},
	}
}

func runVerify(ctx context.Context, cfg *Config, lg *slog.Logger, ref string, out io.Writer) error {
	if isFileRef(ref) {
		digest, err := verify.Trailer(ctx, ref)
		if err != nil {
			return fmt.Errorf("verify %s: %w", ref, err)
		}
		st, err := verify.File(ctx, ref)
		if err != nil {
			return fmt.Errorf("verify %s: %w", ref, err)
		}
		fmt.Fprintf(out, "snapshot file %s is good\n", ref)
		printStatus(out, digest, st)
		return nil
	}
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	m, err := selectBackup(ctx, backups, ref, "", time.Now())
	if err != nil {
		return err
	}
	st, err := verifyBackup(ctx, backups, m, ids, cfg.Snapshot.SpoolDir, lg)
	if err != nil {
		return fmt.Errorf("backup %s failed verification: %w", m.ID, err)
	}
	fmt.Fprintf(out, "backup %s is good: object sha256, decoding, trailer, bbolt check and status match the manifest\n", m.ID)
	printStatus(out, m.SnapshotSHA256, st)
	return nil
}

// isFileRef tells a local file argument from a backup id or "latest".
func isFileRef(ref string) bool {
	if strings.ContainsRune(ref, os.PathSeparator) || strings.HasSuffix(ref, ".db") {
		return true
	}
	_, err := os.Stat(ref)
	return err == nil
}

func printStatus(out io.Writer, digest string, st verify.Status) {
	fmt.Fprintf(out, "  sha256     %s\n", digest)
	fmt.Fprintf(out, "  revision   %d (compacted at %d), %d keys, %s\n", st.Revision, st.CompactRevision, st.TotalKeys, humanBytes(st.Size))
	fmt.Fprintf(out, "  bolt hash  %08x, hashkv %08x\n", st.BoltHash, st.HashKV)
}

// verifyBackup reads backup m back into a temporary file in spoolDir
// (object sha256 and size, decryption, decompression and etcd's trailer,
// checked as the bytes stream), then checks the file read-only against the
// manifest. The temporary file is always removed; one that a verify killed
// with SIGKILL left is removed by the next verify.
func verifyBackup(ctx context.Context, b *repository.Repo, m *repository.Manifest, ids []age.Identity, spoolDir string, lg *slog.Logger) (verify.Status, error) {
	if err := snapshot.PrepareSpoolDir(spoolDir); err != nil {
		return verify.Status{}, err
	}
	sweepLeftovers(spoolDir, "lifeboat-verify-", ".db", "verify", lg)
	path := filepath.Join(spoolDir, "lifeboat-verify-"+m.ID+"-"+strconv.Itoa(os.Getpid())+".db")
	defer os.Remove(path)
	if _, err := repository.Fetch(ctx, b, m, path, repository.FetchOptions{Identities: ids}); err != nil {
		return verify.Status{}, err
	}
	return repository.CheckFile(ctx, path, m)
}
