package main

import (
	"bytes"
	"log"
	"log/slog"
	"strings"
	"testing"
)

// TestStdLogIsStructured: a library that writes with the standard log
// package (the AWS SDK's transfer manager does, when a multipart upload's
// completion fails) writes through lifeboat's logger: a JSON record like
// every other line, not a plain line in the middle of a JSON log.
func TestStdLogIsStructured(t *testing.T) {
	prev := slog.Default()
	t.Cleanup(func() { slog.SetDefault(prev) })
	var stdout, stderr bytes.Buffer
	run(t.Context(), []string{"list", "--store", "file://" + t.TempDir(), "--log-format", "json"}, &stdout, &stderr)
	stderr.Reset()
	log.Printf("failed to complete multipart upload for upload ID %v: %v", "0x1", "context canceled")
	line := strings.TrimSpace(stderr.String())
	if !strings.HasPrefix(line, "{") || !strings.Contains(line, `"msg":"failed to complete multipart upload for upload ID 0x1: context canceled"`) {
		t.Fatalf("the standard log's line in lifeboat's JSON log: %q, want a JSON record", line)
	}
}
