package restore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

func TestMain(m *testing.M) {
	// child.StartEtcd runs this test binary as the drill's etcd (its
	// own executable with child.EtcdCommand, as the lifeboat binary's
	// hidden command does).
	if ran, code := child.Main(os.Args, os.Stderr, restore.ChildWork()); ran {
		os.Exit(code)
	}
	code := m.Run()
	closeKubeReplay()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
