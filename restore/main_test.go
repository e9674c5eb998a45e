package restore_test

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
)

// TestMain runs the drill's children when a test starts this binary as
// one (restoretest.Main).
func TestMain(m *testing.M) { restoretest.Main(m, closeKubeReplay) }
