package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// TestMain runs the hidden commands of a drill (its etcd, restore and
// replay) when a drill in these tests starts this test binary as one
// (child.StartEtcd and the drill's steps run their own executable),
// exactly as the lifeboat binary would.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && child.IsCommand(os.Args[1]) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}
