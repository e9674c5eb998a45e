package verify

import (
	"context"
	"io"
)

// FileSplit is File with the key bucket walked in two halves from minPages
// pages on (0: in one piece), so tests can compare both walks on small files.
func FileSplit(ctx context.Context, path string, minPages uint64) (Status, error) {
	return file(ctx, path, minPages, nil)
}

// FileSplitRecords is FileRecords with FileSplit's minPages.
func FileSplitRecords(ctx context.Context, path string, minPages uint64, rec Records) (Status, error) {
	return file(ctx, path, minPages, rec)
}

// TrailerReader is the stream check under Trailer.
func TrailerReader(ctx context.Context, r io.Reader) (string, int64, error) {
	return trailerReader(ctx, r)
}
