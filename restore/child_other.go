//go:build !linux

package restore

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
