//go:build !(linux || darwin)

package drill

// freeBytes cannot tell the free space on this platform.
func freeBytes(string) (uint64, bool, error) { return 0, false, nil }

// processGone cannot tell on this platform: never sweep.
func processGone(int) bool { return false }
