package agent

import (
	"os"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
)

// TestMain runs a drill's throwaway etcd when restore.StartEtcd starts
// this test binary as one (it runs its own executable with
// restore.EtcdCommand, as the lifeboat binary's hidden command does).
func TestMain(m *testing.M) {
	if ran, code := restore.ChildMain(os.Args, os.Stderr); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
