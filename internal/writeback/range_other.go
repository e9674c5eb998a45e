//go:build !linux

package writeback

import "os"

// startWriteback is unsupported outside Linux: plain writes.
func startWriteback(*os.File, int64, int64) (bool, error) { return false, nil }

// waitWriteback is unsupported outside Linux: plain writes.
func waitWriteback(*os.File, int64, int64) (bool, error) { return false, nil }
