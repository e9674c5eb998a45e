package main

import (
	"context"
	"errors"
	"maps"
	"os"
	"runtime/debug"
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
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
		{"fetch", []string{"fetch", "latest", t.TempDir() + "/snap.db"}, memoryHeadroom},
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

// TestUploadBuffersCapture: a daemon that captures adds capture's bound
// (capture.max_buffer_bytes and two segments being encoded) to the
// upload's part buffers, so that its soft memory limit does not fall
// below what its bounded buffers may hold at a burst of writes (with the
// 25 MiB of part buffers alone the limit would be 57 MiB, under capture's
// 48 MiB plus the runtime).
func TestUploadBuffersCapture(t *testing.T) {
	parts := int64(uploader.DefaultS3Concurrency+2) * uploader.DefaultS3PartSize
	for _, tc := range []struct {
		name    string
		env     map[string]string
		uploads bool
		want    int64
	}{
		{"read-only command", map[string]string{"LIFEBOAT_CAPTURE_ENABLED": "true"}, false, 0},
		{"s3, no capture", nil, true, parts},
		{"s3, capture", map[string]string{"LIFEBOAT_CAPTURE_ENABLED": "true"}, true, parts + 32<<20 + 2*(8<<20)},
		{"s3, capture, own bounds", map[string]string{"LIFEBOAT_CAPTURE_ENABLED": "true",
			"LIFEBOAT_CAPTURE_MAX_BUFFER_BYTES": "64MiB", "LIFEBOAT_CAPTURE_MAX_SEGMENT_BYTES": "4MiB"}, true, parts + 64<<20 + 2*(4<<20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"LIFEBOAT_STORE_URL": "s3://bucket/etcd", "LIFEBOAT_STORE_S3_REGION": "us-east-1"}
			maps.Copy(env, tc.env)
			cfg, err := LoadConfig("", func(k string) string { return env[k] }, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := uploadBuffers(cfg, tc.uploads); got != tc.want {
				t.Errorf("uploadBuffers = %d MiB, want %d MiB", got>>20, tc.want>>20)
			}
		})
	}
}

// TestAnchorLimitAboveBuffers: while capture stores a generation's
// anchor snapshot, the soft limit is the headroom plus the part buffers
// and the watch's hold (61 MiB by default, against the daemon's 105 MiB),
// never below what those bounded buffers may hold plus the headroom (a
// limit under what is live makes the GC run without end), and the
// agent's limit is back when the snapshot ends, failed or not.
func TestAnchorLimitAboveBuffers(t *testing.T) {
	if os.Getenv("GOMEMLIMIT") != "" {
		t.Fatal("GOMEMLIMIT is set: the soft limit is not lifeboat's to choose")
	}
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	env := map[string]string{"LIFEBOAT_STORE_URL": "s3://bucket/etcd", "LIFEBOAT_STORE_S3_REGION": "us-east-1",
		"LIFEBOAT_CAPTURE_ENABLED": "true"}
	cfg, err := LoadConfig("", func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	parts := int64(uploader.DefaultS3Concurrency+2) * uploader.DefaultS3PartSize
	if got, want := anchorBuffers(cfg), parts+cfg.Capture.MaxBufferBytes/8; got != want {
		t.Fatalf("anchorBuffers = %d MiB, want %d MiB", got>>20, want>>20)
	}
	daemon := memoryHeadroom + uploadBuffers(cfg, true)
	for _, fail := range []bool{false, true} {
		debug.SetMemoryLimit(daemon)
		var during int64
		snap := anchorLimited(func(context.Context) (*repository.Manifest, error) {
			during = debug.SetMemoryLimit(-1)
			if fail {
				return nil, errors.New("store down")
			}
			return &repository.Manifest{}, nil
		}, anchorBuffers(cfg))
		_, _ = snap(t.Context())
		if want := memoryHeadroom + parts + holdBytes(cfg); during != want {
			t.Errorf("fail=%v: limit during the anchor %d MiB, want %d MiB", fail, during>>20, want>>20)
		}
		if during < memoryHeadroom+parts+holdBytes(cfg) {
			t.Errorf("fail=%v: limit during the anchor %d MiB under the buffers in use plus the headroom", fail, during>>20)
		}
		if got := debug.SetMemoryLimit(-1); got != daemon {
			t.Errorf("fail=%v: limit after the anchor %d MiB, want the agent's %d MiB", fail, got>>20, daemon>>20)
		}
	}
}
