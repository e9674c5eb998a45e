package child_test

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
)

// TestMain runs the throwaway etcd when child.StartEtcd starts this
// binary as one (restoretest.Main).
func TestMain(m *testing.M) { restoretest.Main(m) }
