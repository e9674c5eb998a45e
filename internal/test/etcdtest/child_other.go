//go:build !linux

package etcdtest

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
