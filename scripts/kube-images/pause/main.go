// Command pause is the sandbox process of the kubeadm node's pods
// (internal/test/kubeadmtest): it holds the pod's namespaces, reaps the
// children a shared process namespace gives it, and exits on SIGINT or
// SIGTERM, as Kubernetes' own pause does. Kubernetes' pause is C; this one
// is Go so that the node's images build from the Go module proxy alone.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 8)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sig {
		if s != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
