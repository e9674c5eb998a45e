package child

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

// RunEtcd is the child side of StartEtcd: it runs an embedded etcd server
// configured by args, the etcd flags StartEtcd passes after EtcdCommand
// (--name, --data-dir, --listen-client-urls, --advertise-client-urls,
// --listen-peer-urls, --initial-advertise-peer-urls, --initial-cluster,
// --initial-cluster-token, --heartbeat-interval, --election-timeout,
// --quota-backend-bytes, --log-level; and --no-sync, lifeboat's own:
// skipSyncs before the server starts), until ctx ends (SIGTERM in the
// caller) or the server fails. etcd's log goes to
// stderr. When etcd panics or exits on the data it serves, it takes this
// process down, never the one that started it.
//
// It is meant for a process of its own: main (the hidden command) or a
// test binary's TestMain.
func RunEtcd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet(EtcdCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := embed.NewConfig()
	var listenClient, advertiseClient, listenPeer, advertisePeer string
	fs.StringVar(&cfg.Name, "name", "lifeboat", "member name")
	fs.StringVar(&cfg.Dir, "data-dir", "", "data directory")
	fs.StringVar(&listenClient, "listen-client-urls", "", "client URL to listen on")
	fs.StringVar(&advertiseClient, "advertise-client-urls", "", "advertised client URL")
	fs.StringVar(&listenPeer, "listen-peer-urls", "", "peer URL to listen on")
	fs.StringVar(&advertisePeer, "initial-advertise-peer-urls", "", "advertised peer URL")
	fs.StringVar(&cfg.InitialCluster, "initial-cluster", "", "initial cluster (name=peerURL)")
	fs.StringVar(&cfg.InitialClusterToken, "initial-cluster-token", "", "initial cluster token")
	fs.UintVar(&cfg.TickMs, "heartbeat-interval", cfg.TickMs, "heartbeat interval (ms)")
	fs.UintVar(&cfg.ElectionMs, "election-timeout", cfg.ElectionMs, "election timeout (ms)")
	fs.Int64Var(&cfg.QuotaBackendBytes, "quota-backend-bytes", 0, "backend quota")
	fs.StringVar(&cfg.LogLevel, "log-level", "error", "log level")
	noSync := NoSyncFlag(fs)
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%s: %w", EtcdCommand, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", EtcdCommand, fs.Args())
	}
	for _, u := range []struct {
		flag, value string
		dst         *[]url.URL
	}{
		{"listen-client-urls", listenClient, &cfg.ListenClientUrls},
		{"advertise-client-urls", advertiseClient, &cfg.AdvertiseClientUrls},
		{"listen-peer-urls", listenPeer, &cfg.ListenPeerUrls},
		{"initial-advertise-peer-urls", advertisePeer, &cfg.AdvertisePeerUrls},
	} {
		if u.value == "" {
			continue
		}
		var urls []url.URL
		for _, s := range strings.Split(u.value, ",") {
			p, err := url.Parse(s)
			if err != nil {
				return fmt.Errorf("%s: --%s: %w", EtcdCommand, u.flag, err)
			}
			urls = append(urls, *p)
		}
		*u.dst = urls
	}
	cfg.Logger = "zap"
	cfg.LogOutputs = []string{"stderr"}
	SkipSyncsIf(*noSync, stderr, "etcd")
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return fmt.Errorf("start etcd on %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd on %s: %w", cfg.Dir, err)
	case <-ctx.Done():
		e.Close()
		return nil
	}
	select {
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcd on %s: %w", cfg.Dir, err)
	case <-e.Server.StopNotify():
		e.Close()
		return errors.New("etcd stopped")
	case <-ctx.Done():
	}
	// A graceful stop; the parent kills the process if it takes 30s.
	e.Close()
	return nil
}

// RestoreCommand is the hidden first argument that makes this program
// restore one member's data directory from a snapshot file (restore's
// RunRestore) instead of its usual work. A drill restores in such a
// child process (restore.RestoreInChild), so that etcdutl's writing of
// the restored bbolt database and WAL runs without lifeboat's soft
// memory limit, like the throwaway etcd that boots the result.
// cmd/lifeboat registers it as a hidden command; a test binary that
// drills dispatches it in TestMain (Main).
const RestoreCommand = "__restore"

// ReplayCommand is the hidden first argument that makes this program
// apply a point-in-time replay's changes to a snapshot file (restore's
// RunReplay) instead of its usual work. A drill replays in such a child
// process (restore.ReplayInChild): etcd's mvcc code then runs without the
// daemon's soft memory limit (its live heap, etcd's key index of the
// whole keyspace, is far above it, and under it the GC runs without
// end), and a panic or fatal exit of that code on inconsistent data ends
// the child, never the agent. cmd/lifeboat registers it as a hidden
// command; a test binary that drills dispatches it in TestMain (Main).
//
// The child gets no store, no credentials and no age identity: the
// parent reads the segments from the store, decrypts and decompresses
// them and checks their chain, and streams their raw form to the child's
// stdin.
const ReplayCommand = "__replay"

// IsCommand reports whether name is one of the hidden commands a drill
// runs this program with (EtcdCommand, RestoreCommand, ReplayCommand).
func IsCommand(name string) bool {
	return name == EtcdCommand || name == RestoreCommand || name == ReplayCommand
}

// Work is what the restore and replay children do, the restore
// package's RunRestore and RunReplay: passed to Main, so that this
// package, which restore builds its children on, needs nothing of it.
// Each writes its own error on its error line.
type Work struct {
	Restore func(ctx context.Context, args []string, in io.Reader, stderr io.Writer) error
	Replay  func(ctx context.Context, args []string, in io.Reader, out io.Writer) error
}

// Main runs the drill's etcd (args[1] is EtcdCommand), the drill's
// restore (RestoreCommand, w.Restore) or its replay (ReplayCommand,
// w.Replay, reading stdin) when this process was started as one, until it
// ends or SIGINT or SIGTERM, and reports that it did with the exit code;
// otherwise it returns false at once. A test binary's TestMain calls it
// first, so that a drill, which runs its own executable, can run the test
// binary as it runs lifeboat.
func Main(args []string, stderr io.Writer, w Work) (ran bool, code int) {
	if len(args) < 2 || !IsCommand(args[1]) {
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// Restore and Replay write their error themselves.
	switch args[1] {
	case RestoreCommand:
		if err := w.Restore(ctx, args[2:], os.Stdin, stderr); err != nil {
			return true, 1
		}
		return true, 0
	case ReplayCommand:
		if err := w.Replay(ctx, args[2:], os.Stdin, stderr); err != nil {
			return true, 1
		}
		return true, 0
	}
	if err := RunEtcd(ctx, args[2:], stderr); err != nil {
		fmt.Fprintln(stderr, err)
		return true, 1
	}
	return true, 0
}
