//go:build !linux || !(amd64 || arm64)

package sysfilter

import (
	"errors"
	"syscall"
)

// Answer is not available here: seccomp filters need Linux on amd64 or
// arm64.
func Answer(calls []uintptr, errno syscall.Errno) error {
	return errors.New("seccomp filters need Linux on amd64 or arm64")
}

// SyncCalls is empty here.
var SyncCalls []uintptr

// Supported reports whether Answer can install a filter here.
const Supported = false
