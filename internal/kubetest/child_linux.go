package kubetest

import "syscall"

// childAttr makes the server die with the test binary, even when that is
// killed (a test timeout).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
