package capture

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	checkInvariants = true // capt's invariants, after every handled item
	goleak.VerifyTestMain(m)
}
