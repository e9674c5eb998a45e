package restore

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// restoreErrorPrefix starts the one line of the child's stderr that
// carries Restore's error, so that the parent returns its exact text
// whatever else the child printed.
const restoreErrorPrefix = "lifeboat-restore-error: "

// RunRestore is the child side of a drill's restore: it restores the
// single member described by args (--snapshot, --data-dir, --name,
// --peer-url, --initial-cluster-token, --skip-hash-check,
// --bump-revision, --mark-compacted) with Restore, or with --in-place
// (StartInPlace) in place, told on in when to write the database;
// --no-sync first makes
// the process's fsync-like calls no-ops (child.SkipSyncsIf), for a drill's
// throwaway copy. On failure it writes
// the error to stderr on one line that the parent reads back, and
// returns it.
func RunRestore(ctx context.Context, args []string, in io.Reader, stderr io.Writer) error {
	fs := flag.NewFlagSet(child.RestoreCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o RestoreOptions
	var peer string
	fs.StringVar(&o.SnapshotPath, "snapshot", "", "snapshot file")
	fs.StringVar(&o.DataDir, "data-dir", "", "data directory")
	fs.StringVar(&o.Name, "name", "", "member name")
	fs.StringVar(&peer, "peer-url", "", "advertised peer URL")
	fs.StringVar(&o.InitialClusterToken, "initial-cluster-token", "", "initial cluster token")
	fs.BoolVar(&o.SkipHashCheck, "skip-hash-check", false, "skip etcdutl's hash check")
	fs.Uint64Var(&o.RevisionBump, "bump-revision", 0, "revision bump")
	fs.BoolVar(&o.MarkCompacted, "mark-compacted", false, "mark compacted")
	inPlace := fs.Bool("in-place", false, "restore the snapshot where it lies, its database written on \""+inPlaceCommit+"\" on stdin")
	noSync := child.NoSyncFlag(fs)
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", child.RestoreCommand, err)
	} else {
		if peer != "" {
			o.PeerURLs = []string{peer}
		}
		child.SkipSyncsIf(*noSync, stderr, "restore")
		if *inPlace {
			err = restoreInPlace(o, in)
		} else {
			_, err = Restore(ctx, o)
		}
	}
	if err != nil {
		child.WriteErrorLine(stderr, restoreErrorPrefix, err)
	}
	return err
}

// RestoreInChild runs Restore(ctx, o) for the single member o names
// (Name, DataDir, PeerURLs[0], InitialClusterToken, SkipHashCheck,
// RevisionBump, MarkCompacted; nothing else) in a child process of this
// program (child.RestoreCommand, see child) and returns Restore's error with its
// own text, or a *child.Crash. The child runs with the Go runtime's
// defaults, as etcdutl run by hand; its memory is the restore's own
// (bbolt maps the database; the copy and the WAL are written through the
// page cache) and ends with it. It is for a drill's throwaway copy: the
// child skips every sync (--no-sync, child.SkipSyncsIf), so the restored gigabyte
// is not forced to disk minutes before it is deleted.
func RestoreInChild(ctx context.Context, o RestoreOptions) error {
	if len(o.PeerURLs) != 1 || o.Name == "" || o.InitialCluster != "" || o.WALDir != "" || o.Force {
		return errors.New("restore in a child process: one member with one peer URL only")
	}
	args, err := restoreChildArgs(o)
	if err != nil {
		return err
	}
	c, err := child.Start(ctx, "restore", args, false)
	if err != nil {
		return err
	}
	// Without its error line it crashed (etcdutl panics on some damaged
	// databases): a *child.Crash, which took only the child down.
	return c.Wait(ctx, map[string]error{restoreErrorPrefix: nil})
}

// restoreChildArgs is the child's command line for RestoreInChild.
func restoreChildArgs(o RestoreOptions) ([]string, error) {
	snap, err := filepath.Abs(o.SnapshotPath)
	if err != nil {
		return nil, fmt.Errorf("snapshot file %s: %w", o.SnapshotPath, err)
	}
	dir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, fmt.Errorf("data directory %s: %w", o.DataDir, err)
	}
	args := []string{child.RestoreCommand,
		"--snapshot", snap, "--data-dir", dir, "--name", o.Name,
		"--peer-url", o.PeerURLs[0], "--initial-cluster-token", o.InitialClusterToken,
		"--bump-revision", fmt.Sprint(o.RevisionBump), "--no-sync",
	}
	if o.SkipHashCheck {
		args = append(args, "--skip-hash-check")
	}
	if o.MarkCompacted {
		args = append(args, "--mark-compacted")
	}
	return args, nil
}

// ChildWork is the work of the restore and replay children (RunRestore,
// RunReplay), for child.Main: the hidden commands' dispatch is the child
// package's, what they do is this package's.
func ChildWork() child.Work { return child.Work{Restore: RunRestore, Replay: RunReplay} }
