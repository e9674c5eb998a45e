//go:build !linux

package backup

// lowerThreadPriority is a no-op where threads cannot be reniced.
func lowerThreadPriority() error { return nil }
