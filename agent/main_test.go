package agent

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestMain runs a drill's throwaway etcd when restore.StartEtcd starts
// this test binary as one (it runs its own executable with
// restore.EtcdCommand, as the lifeboat binary's hidden command does).
func TestMain(m *testing.M) {
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
	os.Exit(m.Run())
}
