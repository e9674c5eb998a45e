//go:build !linux

package kubetest

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
