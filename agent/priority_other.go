//go:build !linux

package agent

// lowerThreadPriority is a no-op where threads cannot be reniced.
func lowerThreadPriority() error { return nil }
