package etcdtest

import "syscall"

// childAttr makes a server started by StartBinary die with the test binary,
// even when it is killed (a test timeout).
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
