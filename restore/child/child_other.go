//go:build !linux

package child

import (
	"syscall"
)

func childAttr() *syscall.SysProcAttr { return nil }
