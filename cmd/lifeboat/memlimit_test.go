package main

import (
	"os"
	"runtime/debug"
	"testing"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestMemoryLimitByCommand: with an S3 store, only the commands that
// store backups (snapshot, agent, demo) add the upload's part buffers to
// the runtime's soft memory limit; a command that only reads (list, get,
// fetch, ...) keeps the headroom alone, so that its garbage is collected
// before it grows past what it needs (the first get of a 1.1 GB backup
// peaked at 77 MiB of RSS under the upload's limit, 63 MiB without).
func TestMemoryLimitByCommand(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Fatal("GOMEMLIMIT is set: the soft limit is not lifeboat's to choose")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	store := []string{"--store", "s3://bucket/etcd", "--s3-region", "us-east-1", "--s3-endpoint", "http://127.0.0.1:1"}
	parts := int64(uploader.DefaultS3Concurrency+2) * uploader.DefaultS3PartSize
	for _, tc := range []struct {
		name string
		args []string
		want int64
	}{
		{"list", []string{"list"}, memoryHeadroom},
		{"fetch", []string{"fetch", "latest", "-o", t.TempDir() + "/snap.db"}, memoryHeadroom},
		{"snapshot", []string{"snapshot", "--endpoints", "http://127.0.0.1:1", "--dial-timeout", "1s"}, memoryHeadroom + parts},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetMemoryLimit(1 << 40)
			runCLI(t, nil, append(tc.args, store...)...) // fails: nothing listens; the limit is set before
			if got := debug.SetMemoryLimit(-1); got != tc.want {
				t.Errorf("soft memory limit %d MiB, want %d MiB", got>>20, tc.want>>20)
			}
		})
	}
}
