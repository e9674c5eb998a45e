// Package sysfilter answers chosen system calls of this process with a
// fixed result instead of running them, through a seccomp filter on
// every thread (and inherited by children). lifeboat uses it for the
// drill's child processes, whose data is deleted after the drill: their
// fsync-like calls return success without writing anything out
// (child.SkipSyncsIf). Tests use it to refuse a call as a systemd
// SystemCallFilter would. A filter cannot be removed again; it can only
// restrict the process further.
package sysfilter
