package etcdtest

import (
	"os/exec"
	"runtime"
)

// StartChild starts cmd as a child that dies with the test binary (on
// Linux, Pdeathsig), however the test ends. When it exits, Wait's error is
// stored in *waitErr and then exited is closed. Servers started by tests
// (etcd, kube-apiserver) all start this way.
func StartChild(cmd *exec.Cmd, exited chan<- struct{}, waitErr *error) error {
	cmd.SysProcAttr = childAttr()
	started := make(chan error, 1)
	go func() {
		// Pdeathsig fires when the thread that started the child ends:
		// keep this goroutine on its thread until the child exits.
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			*waitErr = cmd.Wait()
		}
		close(exited)
	}()
	return <-started
}
