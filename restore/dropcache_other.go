//go:build !linux

package restore

// dropCache does nothing where the kernel takes no advice.
func dropCache(string) {}
