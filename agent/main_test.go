package agent

import (
	"os"
	"testing"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/restore/child"
)

// TestMain runs a drill's throwaway etcd when child.StartEtcd starts
// this test binary as one (it runs its own executable with
// child.EtcdCommand, as the lifeboat binary's hidden command does).
func TestMain(m *testing.M) {
	if ran, code := child.Main(os.Args, os.Stderr, restore.ChildWork()); ran {
		os.Exit(code)
	}
	os.Exit(m.Run())
}
