package restore_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/lifeboat-dev/lifeboat/restore"
)

func TestMain(m *testing.M) {
	// restore.StartEtcd runs this test binary as the drill's etcd (its
	// own executable with restore.EtcdCommand, as the lifeboat binary's
	// hidden command does).
	if ran, code := restore.ChildMain(os.Args, os.Stderr); ran {
		os.Exit(code)
	}
	code := m.Run()
	closeBenchFixture()
	closeKubeReplay()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
