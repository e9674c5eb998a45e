//go:build unix

package main

import (
	"errors"
	"syscall"
)

// processGone reports whether no process with this pid exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
