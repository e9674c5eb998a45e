package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestMain runs the hidden etcd command when a drill in these tests
// starts this test binary as its throwaway etcd (restore.StartEtcd runs
// its own executable), exactly as the lifeboat binary would.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == restore.EtcdCommand || os.Args[1] == restore.RestoreCommand) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
