package verify

import "context"

// FileSplit is File with the key bucket walked in two halves from minPages
// pages on (0: in one piece), so tests can compare both walks on small files.
func FileSplit(ctx context.Context, path string, minPages uint64) (Status, error) {
	return file(ctx, path, minPages)
}
