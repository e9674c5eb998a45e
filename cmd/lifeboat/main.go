// Command lifeboat takes verified etcd snapshots, stores them, and proves
// they restore. See the README for the command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"golang.org/x/term"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Version is set at build time with -ldflags "-X main.Version=…".
var Version = "dev"

// Exit codes: the contract scripts rely on.
const (
	exitOK     = 0
	exitFailed = 1 // the operation failed
	exitUsage  = 2 // bad usage or configuration
)

// usageError marks errors that are the caller's mistake (exit 2).
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }

// memoryHeadroom is the soft memory limit of the Go runtime on top of
// the store's own bounded buffers, unless GOMEMLIMIT says otherwise:
// lifeboat's buffers are bounded (see the README), so this keeps garbage
// from piling up next to etcd.
const memoryHeadroom = 32 << 20

// setMemoryLimit sets the runtime's soft limit to the headroom plus
// bufferBytes, unless GOMEMLIMIT is set.
func setMemoryLimit(bufferBytes int64) {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(memoryHeadroom + bufferBytes)
	}
}

// liftMemoryLimit removes the soft limit for the rest of a one-shot
// command that replays captured changes (restore, drill, ls/get/diff at a
// point in time), unless GOMEMLIMIT is set. The replay's live heap is
// etcd's key index of the whole keyspace, far above the limit: under it
// the GC runs without end and saves no memory (onto the 1 GiB bench base,
// 4 438 revisions/s with a 48 MiB limit vs 16 276 without; see
// docs/benchmarks.md). The daemon keeps its limit: its drills replay in a
// child process (child.ReplayCommand) that runs without it. It also lets
// the heap grow to restore.ReplayGCPercent before a collection (unless
// GOGC is set).
func liftMemoryLimit() {
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(math.MaxInt64)
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(restore.ReplayGCPercent)
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line and turns its error into an exit code:
// the one place that happens.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, a := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	err = a.explainKeys(err)
	fmt.Fprintln(stderr, "lifeboat: "+err.Error())
	var ce *ConfigError
	var ue usageError
	if errors.As(err, &ce) || errors.As(err, &ue) || errors.Is(err, snapshot.ErrMixedClusters) || errors.Is(err, uploader.ErrNoStore) ||
		// Refusals of trust: another cluster's backups under this name,
		// two lineages to choose from, an untrusted backup named.
		keysUnusable(err) || errors.Is(err, repository.ErrOtherLineage) || errors.Is(err, repository.ErrLineageAmbiguous) || errors.Is(err, repository.ErrUntrusted) {
		return exitUsage
	}
	return exitFailed
}

// newLogger builds the logger: text on a terminal, JSON otherwise.
func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	_ = lv.UnmarshalText([]byte(level)) // validated by Config.Validate
	if format == "auto" {
		format = "json"
		if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			format = "text"
		}
	}
	opts := &slog.HandlerOptions{Level: lv}
	if format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// keysUnusable reports whether err says the keys given cannot decrypt
// what was asked for (no identity, the wrong one): not a verdict on the
// backup, a usage error (exit 2) everywhere.
func keysUnusable(err error) bool {
	return errors.Is(err, repository.ErrDecrypt) || errors.Is(err, repository.ErrNoIdentity) ||
		errors.Is(err, kit.ErrDecrypt) || errors.Is(err, kit.ErrNoIdentity)
}
