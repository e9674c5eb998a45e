package main

import (
	"context"
	"errors"
	"fmt"

	"filippo.io/age"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/verify"
)

func newVerifyCmd(a *app) *cobra.Command {
	var changes, locks bool
	var generation string
	c := &cobra.Command{
		Use:   "verify ID|latest|latest-proven|FILE | verify --changes [--generation G] | verify --locks",
		Short: "Check a stored backup (object sha256, decryption, decompression, trailer, bbolt, status against the manifest), a local snapshot file, or (--changes) the captured change segments",
		Long: `verify ID|latest|latest-proven|FILE checks one backup or snapshot file.

verify --changes reads every change segment of every capture generation
(or of --generation G): each must parse (sha256 trailer, zstd, age), the
first must start right after its committed anchor snapshot's revision, and
the chain must be unbroken (contiguous revisions, previous hashes, no
overlap, no second writer, fencing tokens never decreasing). It prints the
revisions covered and the first problem with its revisions and keys, and
exits 1 on any problem.

verify --locks reads the Object Lock retention of every object a retained
backup, window or kit needs (data objects, manifests, kit objects and kit
manifests, the segments and newest markers of recoverable windows) from the
store (on a copy, with --store of the copy: the copy's own locks) and lists
any that is unlocked or whose retain-until falls before what
store.object_lock gives it; exit 1 when any.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if locks {
				if changes || generation != "" || len(args) != 0 {
					return usagef("verify --locks takes no argument, --changes or --generation")
				}
				return nil
			}
			if changes {
				if len(args) != 0 {
					return usagef("verify --changes takes no argument (got %q): use --generation to check one", args[0])
				}
				return nil
			}
			if generation != "" {
				return usagef("--generation needs --changes")
			}
			return cobra.ExactArgs(1)(cmd, args)
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, err := a.config()
			if err != nil {
				return err
			}
			if locks {
				return runVerifyLocks(cmd.Context(), cfg, a.logger(cfg), a.stdout)
			}
			if changes {
				return runVerifyChanges(cmd.Context(), cfg, a.logger(cfg), generation, a.stdout)
			}
			return runVerify(cmd.Context(), cfg, a.logger(cfg), args[0], a.stdout)
		},
	}
	c.Flags().BoolVar(&changes, "changes", false, "check the captured change segments instead of a backup")
	c.Flags().StringVar(&generation, "generation", "", "with --changes: only this generation")
	c.Flags().BoolVar(&locks, "locks", false, "check the Object Lock of every object a retained backup, window or kit needs")
	return c
}

// errChangesBroken is returned (exit 1) when verify --changes found a problem.
var errChangesBroken = errors.New("change segments failed verification")

// runVerifyChanges checks every generation's (or one's) change chain and
// prints a report, one generation at a time.
func runVerifyChanges(ctx context.Context, cfg *Config, lg *slog.Logger, gen string, out io.Writer) error {
	b, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	ws, err := recoverableWindows(ctx, b, gen)
	if err != nil {
		return err
	}
	if len(ws) == 0 {
		fmt.Fprintf(out, "no capture generations of cluster %q in %s: nothing to verify\n", cfg.Cluster, b.Store)
		return nil
	}
	for i := range ws {
		for _, si := range ws[i].Segments {
			if err := needIdentity(si, &ws[i], ids); err != nil {
				return err
			}
		}
	}
	broken := 0
	for _, w := range ws {
		c, err := b.VerifyChanges(ctx, w, ids)
		if err != nil {
			return fmt.Errorf("verify generation %s: %w", w.Generation, err)
		}
		if c.Problem == nil {
			fmt.Fprintf(out, "generation %s is good: revisions %d-%d (%s to %s), %d segment(s), %d revision(s), %s\n",
				w.Generation, c.From, c.Through, w.FromTime.UTC().Format(time.RFC3339), w.ThroughTime.UTC().Format(time.RFC3339),
				c.Segments, c.Revisions, units.Bytes(c.Bytes))
			continue
		}
		broken++
		fmt.Fprintf(out, "generation %s is BROKEN: %v\n", w.Generation, c.Problem)
		if c.ProblemKey != "" {
			fmt.Fprintf(out, "  at %s", c.ProblemKey)
			if c.ProblemFrom != 0 || c.ProblemTo != 0 {
				fmt.Fprintf(out, ", revisions %d-%d", c.ProblemFrom, c.ProblemTo)
			}
			fmt.Fprintln(out)
		}
		if w.Anchor != nil {
			fmt.Fprintf(out, "  verified before it: revisions %d-%d, %d segment(s), %d revision(s): a point-in-time restore can reach only these\n",
				c.From, c.Through, c.Segments, c.Revisions)
		}
	}
	fmt.Fprintf(out, "summary: %d generation(s): %d good, %d broken\n", len(ws), len(ws)-broken, broken)
	if broken > 0 {
		return fmt.Errorf("%w: %d of %d generation(s) broken", errChangesBroken, broken, len(ws))
	}
	return nil
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
		err = withPrevious(ctx, backups, ref, m, err)
		if keysUnusable(err) {
			return fmt.Errorf("backup %s: %w", m.ID, err)
		}
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
	fmt.Fprintf(out, "  revision   %d (compacted at %d), %d keys, %s\n", st.Revision, st.CompactRevision, st.TotalKeys, units.Bytes(st.Size))
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
	defer writeback.Remove(path) // in steps: etcd may share the disk
	if _, err := repository.Fetch(ctx, b, m, path, repository.FetchOptions{Identities: ids}); err != nil {
		noteDamage(ctx, b, err, nil, repository.FoundByVerify, lg)
		return verify.Status{}, err
	}
	return repository.CheckFile(ctx, path, m)
}
