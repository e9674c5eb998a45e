//go:build !(linux || darwin)

package drill

// processGone cannot tell on this platform: never sweep.
func processGone(int) bool { return false }
