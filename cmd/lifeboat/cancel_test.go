package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/etcdtest"
)

// throttleProxy forwards TCP to target, the server-to-client direction at
// about bytesPerSec, so a snapshot stream takes long enough to interrupt.
func throttleProxy(t *testing.T, target string, bytesPerSec int) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Add(2)
			go func() { defer wg.Done(); io.Copy(s, c); s.Close() }()
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, bytesPerSec/20)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
						time.Sleep(50 * time.Millisecond)
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

// TestSnapshotCancelledMidStream is what SIGINT/SIGTERM do (main turns
// them into a cancelled context): exit 1, nothing stored, spool empty.
func TestSnapshotCancelledMidStream(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 1500)
	target := strings.TrimPrefix(c.Endpoints()[0], "http://")
	proxy := throttleProxy(t, target, 512<<10)

	dir := t.TempDir()
	store, spool := filepath.Join(dir, "store"), filepath.Join(dir, "spool")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"snapshot", "--endpoints", "http://" + proxy, "--store", "file://" + store, "--spool-dir", spool, "--log-level", "error"}, &stdout, &stderr)
	}()
	// Wait until the stream is under way: the (unlinked) spool file has
	// bytes.
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
