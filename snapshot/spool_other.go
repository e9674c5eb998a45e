//go:build !linux

package snapshot

import (
	"os"
	"strconv"
)

// createAnonymous creates a file in dir that is unlinked right after it was
// created.
func createAnonymous(dir string) (*os.File, error) { return createUnlinked(dir) }

// SpoolPath returns a path by which this process opens the file f again,
// also when f has no name (CreateSpool).
func SpoolPath(f *os.File) string {
	return "/dev/fd/" + strconv.FormatUint(uint64(f.Fd()), 10)
}
