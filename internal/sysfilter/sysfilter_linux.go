//go:build linux && (amd64 || arm64)

package sysfilter

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Answer installs a seccomp filter on every thread of this process that
// answers each system call in calls (numbers for this architecture, e.g.
// unix.SYS_FSYNC) with errno without running it; errno 0 makes the call
// return success. Every other call runs as before.
func Answer(calls []uintptr, errno syscall.Errno) error {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		arch = unix.AUDIT_ARCH_AARCH64
	default:
		return fmt.Errorf("no seccomp filter for %s", runtime.GOARCH)
	}
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	// The architecture first (another one's numbers mean other calls),
	// then one comparison per call: a match jumps to the last
	// instruction, the answer; no match falls through to "allow".
	filter := []unix.SockFilter{
		{Code: ld, K: 4}, // seccomp_data.arch
		{Code: jeq, Jt: 1, K: arch},
		{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		{Code: ld, K: 0}, // seccomp_data.nr
	}
	for i, nr := range calls {
		filter = append(filter, unix.SockFilter{Code: jeq, Jt: uint8(len(calls) - i), K: uint32(nr)})
	}
	filter = append(filter,
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ALLOW},
		unix.SockFilter{Code: ret, K: unix.SECCOMP_RET_ERRNO | uint32(errno)},
	)
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog))); e != 0 {
		return fmt.Errorf("seccomp(SECCOMP_SET_MODE_FILTER): %w", e)
	}
	return nil
}

// SyncCalls are the system calls that write a file's data out: fsync,
// fdatasync, sync_file_range, syncfs and sync.
var SyncCalls = []uintptr{unix.SYS_FSYNC, unix.SYS_FDATASYNC, unix.SYS_SYNC_FILE_RANGE, unix.SYS_SYNCFS, unix.SYS_SYNC}

// Supported reports whether Answer can install a filter here.
const Supported = true
