package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestSnapshotCancelledMidStream is what SIGINT/SIGTERM do (main turns
// them into a cancelled context): exit 1, nothing stored, spool empty.
func TestSnapshotCancelledMidStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 1500)
	// The member hangs after 2 MiB of its about 7 MiB: the stream is
	// under way and does not end before the cancel (the spool is written
	// 1 MiB at a time: it holds 1 MiB before the stall).
	proxy := etcdtest.NewProxy(t, c.Members[0].ClientURL, etcdtest.ProxyOptions{StallAfter: 2 << 20})

	dir := t.TempDir()
	store, spool := filepath.Join(dir, "store"), filepath.Join(dir, "spool")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"snapshot", "--endpoints", proxy.URL, "--store", "file://" + store, "--spool-dir", spool, "--log-level", "error"}, &stdout, &stderr)
	}()
	// Wait until the stream is under way and hangs, the (unlinked) spool
	// file has bytes.
	select {
	case <-proxy.Stalled():
	case <-time.After(time.Minute):
		t.Fatal("the stream did not reach the proxy's stall in a minute")
	}
	waitSpool(t, os.Getpid(), spool, 1)
	cancel()
	select {
	case code := <-done:
		if code != 1 {
			t.Errorf("exit %d, want 1; stderr: %s", code, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("snapshot did not stop after cancel")
	}
	if !strings.Contains(stderr.String(), "canceled") {
		t.Errorf("error does not say it was cancelled: %s", stderr.String())
	}
	if files := storeFiles(t, store); len(files) != 0 {
		t.Errorf("store holds files after a cancelled snapshot: %v", files)
	}
	if entries, _ := os.ReadDir(spool); len(entries) != 0 {
		t.Errorf("spool not empty: %v", entries)
	}
}
