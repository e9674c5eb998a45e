package snapshot

import (
	"fmt"
	"os"
)

// CreateSpool creates a spool file in dir (0600) that has no name in dir
// (Linux: O_TMPFILE; elsewhere, or on file systems without it, a file
// unlinked right after it was created): however the process ends, even by
// SIGKILL or the OOM killer, the kernel frees the file and nothing is left
// behind in dir. The file lives as long as it is open; other readers in
// this process open it by SpoolPath. The caller closes it.
func CreateSpool(dir string) (*os.File, error) {
	f, err := createAnonymous(dir)
	if err != nil {
		return nil, fmt.Errorf("create spool file in %s (check --spool-dir): %w", dir, err)
	}
	return f, nil
}

// createUnlinked creates a file in dir and unlinks it at once. Only a
// process killed between the two calls can leave it (empty) behind.
func createUnlinked(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, ".lifeboat-spool-*")
	if err != nil {
		return nil, err
	}
	if err := os.Remove(f.Name()); err != nil {
		_ = f.Close()
		return nil, err
	}
	return f, nil
}
