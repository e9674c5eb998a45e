package main

import (
	"context"
	"encoding/json"
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
	file   string // the snapshot file to write, - for stdout
	output string // the report's format: table or json
	force  bool
}

func newFetchCmd(a *app) *cobra.Command {
	var o fetchOptions
	var outputFile string
	c := &cobra.Command{
		Use:   "fetch ID|latest|latest-proven FILE|-",
		Short: "Download a backup as a plain etcd snapshot file (checked, decrypted, decompressed) for etcdutl snapshot restore",
		Long: `fetch downloads a backup, checks the stored object's sha256 against the
manifest, decrypts and decompresses it, checks etcd's sha256 trailer, the
bbolt structure and the status against the manifest, and writes the raw
snapshot to FILE (or --output-file FILE): what etcdctl snapshot save writes
and etcdutl snapshot restore takes. The file is 0600, written under a
temporary name and renamed when every check passed; on failure nothing is
left. An existing FILE is refused unless --force. FILE - writes to stdout
(checked first in --spool-dir). -o json prints what was written as JSON.

latest-proven is the newest backup whose last drill passed.`,
		Args: maxArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.parse(cmd, args, outputFile, a.stderr); err != nil {
				return err
			}
			cfg, err := a.config()
			if err != nil {
				return err
			}
			return runFetch(cmd.Context(), a, cfg, a.logger(cfg), o)
		},
	}
	addOutputFlag(c, &o.output, "what was written: table or json (the old -o FILE still names the file, with a warning)")
	c.Flags().StringVar(&outputFile, "output-file", "", "the snapshot file to write (- for stdout), instead of the FILE argument")
	c.Flags().BoolVar(&o.force, "force", false, "replace an existing FILE")
	return c
}

// parse checks fetch's arguments: the backup, the file (the second
// argument or --output-file) and -o. A value of -o that is not a format
// name is the old spelling of the file (-o FILE, before -o meant the
// format in fetch as everywhere else): it still works, with a warning on
// stderr, for one release.
func (o *fetchOptions) parse(cmd *cobra.Command, args []string, outputFile string, stderr io.Writer) error {
	if len(args) == 0 {
		return usagef("give a backup id, latest or latest-proven (see %s --help)", cmd.CommandPath())
	}
	o.ref = args[0]
	if o.ref != "latest" && o.ref != "latest-proven" && !repository.ValidID(o.ref) {
		return usagef("%q is not a backup id, latest or latest-proven", o.ref)
	}
	var files []string
	if len(args) == 2 {
		files = append(files, args[1])
	}
	if cmd.Flags().Changed("output-file") {
		files = append(files, outputFile)
	}
	if o.output != "table" && o.output != "json" {
		fmt.Fprintf(stderr, "lifeboat: warning: -o FILE is deprecated: -o is the output format (table or json) as in every command; "+
			"give the file as the argument after the backup (lifeboat fetch %s %s) or with --output-file (-o FILE stops working in the next release)\n",
			o.ref, shellJoin([]string{o.output}))
		files, o.output = append(files, o.output), "table"
	}
	switch {
	case len(files) == 0:
		return usagef("give the file to write: lifeboat fetch %s FILE (- for stdout)", o.ref)
	case len(files) > 1:
		return usagef("give the file either as an argument or with --output-file, once (got %s)", strings.Join(files, ", "))
	case files[0] == "":
		return usagef("the file to write is empty: give a path, or - for stdout")
	case files[0] == "-" && o.output == "json":
		return usagef("-o json prints on stdout, which holds the snapshot with FILE -: write to a file")
	}
	o.file = files[0]
	return nil
}

func runFetch(ctx context.Context, a *app, cfg *Config, lg *slog.Logger, o fetchOptions) (err error) {
	toStdout := o.file == "-"
	if f, ok := a.stdout.(*os.File); ok && toStdout && term.IsTerminal(int(f.Fd())) {
		return usagef("FILE -: stdout is a terminal; redirect it (> snap.db) or give a file")
	}
	if !toStdout && !o.force {
		if _, err := os.Lstat(o.file); err == nil {
			return fmt.Errorf("%s exists: refusing to overwrite it (use --force to replace it)", o.file)
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
	dir, base := filepath.Dir(o.file), filepath.Base(o.file)
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
	if err := writeback.CommitFile(tmp, o.file, !o.force); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write %s: %s appeared while fetching: refusing to overwrite it (use --force to replace it)", o.file, o.file)
	} else if err != nil {
		return fmt.Errorf("write %s: %w", o.file, err)
	}
	return printFetched(a.stdout, o, m, res)
}

// fetched is what fetch -o json prints.
type fetched struct {
	BackupID       string `json:"backup_id"`
	Revision       int64  `json:"revision"`
	Keys           int    `json:"keys"`
	File           string `json:"file"`
	Bytes          int64  `json:"bytes"`
	SnapshotSHA256 string `json:"snapshot_sha256"`
}

func printFetched(w io.Writer, o fetchOptions, m *repository.Manifest, res *repository.FetchResult) error {
	if o.output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(fetched{BackupID: m.ID, Revision: m.Revision, Keys: m.TotalKeys, File: o.file, Bytes: res.Size, SnapshotSHA256: res.SnapshotSHA256})
	}
	fmt.Fprintf(w, "backup %s: revision %d, %d keys, written to %s (%s, sha256 %s): checked against the manifest\n",
		m.ID, m.Revision, m.TotalKeys, o.file, units.Bytes(res.Size), res.SnapshotSHA256)
	fmt.Fprintf(w, "restore it with: etcdutl snapshot restore %s --data-dir DIR --name NAME --initial-cluster NAME=PEER-URL --initial-advertise-peer-urls PEER-URL\n", shellJoin([]string{o.file}))
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
