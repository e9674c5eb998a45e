package snapshot

import (
	"context"
	"fmt"
	"io"
	"os"
)

// SaveForTest runs Take's copy loop (save) on r instead of a member's
// stream, into a new spool file at spoolPath, as Take does: opts.Timeout
// bounds it, the error names the spool file, and on failure the file is
// removed.
func SaveForTest(ctx context.Context, r io.Reader, spoolPath string, tee io.Writer, opts Options) (int64, string, error) {
	opts = opts.withDefaults()
	if opts.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opts.Timeout)
		defer cancel()
	}
	f, err := createSpool(spoolPath)
	if err != nil {
		return 0, "", err
	}
	size, sha, err := save(ctx, r, f, tee, opts)
	if err != nil {
		discardSpool(f)
		return size, "", fmt.Errorf("save snapshot to %s: %w", spoolPath, err)
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(spoolPath)
		return size, "", fmt.Errorf("close spool file %s: %w", spoolPath, err)
	}
	return size, sha, nil
}
