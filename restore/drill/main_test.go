package drill_test

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
)

// TestMain runs the drill's children when a drill starts this binary as
// one (restoretest.Main).
func TestMain(m *testing.M) { restoretest.Main(m, closeBenchFixture) }
