package restore_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/restore"
)

func TestMain(m *testing.M) {
	// restore.StartEtcd runs this test binary as the drill's etcd (its
	// own executable with restore.EtcdCommand, as the lifeboat binary's
	// hidden command does).
	if len(os.Args) > 1 && os.Args[1] == restore.EtcdCommand {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := restore.RunEtcd(ctx, os.Args[2:], os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	closeBenchFixture()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
