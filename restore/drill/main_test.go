package drill_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

func TestMain(m *testing.M) {
	// A drill runs this test binary as its etcd, restore and replay
	// children (its own executable with child.EtcdCommand,
	// RestoreCommand or ReplayCommand, as the lifeboat binary's hidden
	// commands do).
	if ran, code := child.Main(os.Args, os.Stderr, restore.ChildWork()); ran {
		os.Exit(code)
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
