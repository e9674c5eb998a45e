//go:build linux || darwin

package drill

import (
	"errors"
	"syscall"
)

// processGone reports whether no process with this pid exists.
func processGone(pid int) bool {
	err := syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}
