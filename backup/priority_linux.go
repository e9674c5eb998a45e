package backup

import "golang.org/x/sys/unix"

// lowerThreadPriority renices the calling OS thread (the caller has locked
// its goroutine to it) so that the work on it yields the CPU to etcd and to
// the snapshot stream: compression may lag behind the stream, since the
// spool file buffers it, but must not slow the member down. A seccomp
// filter without setpriority (systemd's SystemCallFilter) refuses it.
func lowerThreadPriority() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 10)
}
