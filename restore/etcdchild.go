package restore

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
	noSync := noSyncFlag(fs)
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
	skipSyncsIf(*noSync, stderr, "etcd")
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

// IsChildCommand reports whether name is one of the hidden commands a
// drill runs this program with (EtcdCommand, RestoreCommand,
// ReplayCommand).
func IsChildCommand(name string) bool {
	return name == EtcdCommand || name == RestoreCommand || name == ReplayCommand
}

// ChildMain runs the drill's etcd (args[1] is EtcdCommand), the drill's
// restore (RestoreCommand) or its replay (ReplayCommand, reading stdin)
// when this process was started as one, until it ends or SIGINT or
// SIGTERM, and reports that it did with the exit code; otherwise it
// returns false at once. A test binary's TestMain calls it first, so that
// a drill, which runs its own executable, can run the test binary as it
// runs lifeboat.
func ChildMain(args []string, stderr io.Writer) (ran bool, code int) {
	if len(args) < 2 || !IsChildCommand(args[1]) {
		return false, 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// RunRestore and RunReplay write their error themselves.
	switch args[1] {
	case RestoreCommand:
		if err := RunRestore(ctx, args[2:], stderr); err != nil {
			return true, 1
		}
		return true, 0
	case ReplayCommand:
		if err := RunReplay(ctx, args[2:], os.Stdin, stderr); err != nil {
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
