package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/lifeboat-dev/lifeboat/internal/units"
	"github.com/lifeboat-dev/lifeboat/internal/writeback"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

type fetchOptions struct {
	ref    string
	output string
	force  bool
}

func newFetchCmd(a *app) *cobra.Command {
	var o fetchOptions
	c := &cobra.Command{
		Use:   "fetch ID|latest|latest-proven -o FILE",
		Short: "Download a backup as a plain etcd snapshot file (checked, decrypted, decompressed) for etcdutl snapshot restore",
		Long: `fetch downloads a backup, checks the stored object's sha256 against the
manifest, decrypts and decompresses it, checks etcd's sha256 trailer, the
bbolt structure and the status against the manifest, and writes the raw
snapshot: what etcdctl snapshot save writes and etcdutl snapshot restore
takes. The file is 0600, written under a temporary name and renamed when
every check passed; on failure nothing is left. An existing FILE is refused
unless --force. -o - writes to stdout (checked first in --spool-dir).

latest-proven is the newest backup whose last drill passed.`,
		Args: maxArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("give a backup id, latest or latest-proven (see %s --help)", cmd.CommandPath())
			}
			o.ref = args[0]
			if o.ref != "latest" && o.ref != "latest-proven" && !repository.ValidID(o.ref) {
				return usagef("%q is not a backup id, latest or latest-proven", o.ref)
			}
			if o.output == "" {
				return usagef("-o FILE is required (-o - for stdout)")
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runFetch(cmd.Context(), a, cfg, a.logger(cfg), o)
		},
	}
	c.Flags().StringVarP(&o.output, "output", "o", "", "the snapshot file to write (- for stdout)")
	c.Flags().BoolVar(&o.force, "force", false, "replace an existing FILE")
	return c
}

func runFetch(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o fetchOptions) (err error) {
	toStdout := o.output == "-"
	if f, ok := a.stdout.(*os.File); ok && toStdout && term.IsTerminal(int(f.Fd())) {
		return usagef("-o -: stdout is a terminal; redirect it (> snap.db) or give -o FILE")
	}
	if !toStdout && !o.force {
		if _, err := os.Lstat(o.output); err == nil {
			return fmt.Errorf("%s exists: refusing to overwrite it (use --force to replace it)", o.output)
		}
	}
	backups, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	ids, err := identities(cfg)
	if err != nil {
		return err
	}
	m, err := selectBackup(ctx, backups, o.ref, "", time.Now())
	if err != nil {
		return err
	}
	defer func() { err = withPrevious(ctx, backups, o.ref, m, err) }()
	// The temporary file lives beside FILE, so the rename is atomic, or in
	// the spool dir for stdout.
	dir, base := filepath.Dir(o.output), filepath.Base(o.output)
	if toStdout {
		if err := snapshot.PrepareSpoolDir(cfg.Snapshot.SpoolDir); err != nil {
			return err
		}
		dir, base = cfg.Snapshot.SpoolDir, "lifeboat-fetch-"+m.ID
	}
	tmpPrefix := "." + base + ".lifeboat-tmp-"
	sweepLeftovers(dir, tmpPrefix, "", "fetch", lg)
	tmp := filepath.Join(dir, tmpPrefix+strconv.Itoa(os.Getpid()))
	defer os.Remove(tmp)

	p := newProgress(a.stderr, lg, "download", m.ObjectSize)
	res, err := repository.Fetch(ctx, backups, m, tmp, repository.FetchOptions{Identities: ids, Progress: p.update})
	p.done()
	if err != nil {
		return fmt.Errorf("fetch backup %s: %w", m.ID, err)
	}
	if _, err := repository.CheckFile(ctx, tmp, m); err != nil {
		return fmt.Errorf("backup %s failed verification, nothing was written: %w", m.ID, err)
	}
	if toStdout {
		return copyFileTo(a.stdout, tmp)
	}
	// Without --force the hard link refuses a FILE that appeared meanwhile.
	if err := writeback.CommitFile(tmp, o.output, !o.force); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write %s: %s appeared while fetching: refusing to overwrite it (use --force to replace it)", o.output, o.output)
	} else if err != nil {
		return fmt.Errorf("write %s: %w", o.output, err)
	}
	fmt.Fprintf(a.stdout, "backup %s: revision %d, %d keys, written to %s (%s, sha256 %s): checked against the manifest\n",
		m.ID, m.Revision, m.TotalKeys, o.output, units.Bytes(res.Size), res.SnapshotSHA256)
	fmt.Fprintf(a.stdout, "restore it with: etcdutl snapshot restore %s --data-dir DIR --name NAME --initial-cluster NAME=PEER-URL --initial-advertise-peer-urls PEER-URL\n", shellJoin([]string{o.output}))
	return nil
}

func copyFileTo(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyBuffer(w, f, make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("write the snapshot to stdout: %w", err)
	}
	return nil
}

// sweepLeftovers removes the temporary files that earlier runs of a
// command left in dir when their process was killed with SIGKILL (or the
// machine crashed): files named prefix + [anything "-"] + pid + suffix whose
// process is gone. A failed fetch or verify leaves nothing, even then.
func sweepLeftovers(dir, prefix, suffix, what string, lg *slog.Logger) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || !strings.HasSuffix(name, suffix) || len(name) < len(prefix)+len(suffix) {
			continue
		}
		mid := name[len(prefix) : len(name)-len(suffix)]
		if i := strings.LastIndexByte(mid, '-'); i >= 0 {
			mid = mid[i+1:]
		}
		pid, err := strconv.Atoi(mid)
		if err != nil || pid <= 0 || !processGone(pid) {
			continue
		}
		p := filepath.Join(dir, name)
		if err := os.Remove(p); err == nil {
			lg.Info("removed the leftover of an interrupted "+what, "path", p)
		}
	}
}
