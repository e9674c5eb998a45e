package child

import (
	"syscall"
)

// childAttr makes an external etcd die with lifeboat: a drill's server
// must never outlive the drill, even when lifeboat is killed.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
