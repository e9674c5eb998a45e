package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/internal/syncbuf"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
)

// TestCaptureOptions: the capture keys' defaults, their environment names
// (LIFEBOAT_CAPTURE as well as LIFEBOAT_CAPTURE_ENABLED, which wins), and
// their bounds, each refused with a *ConfigError (exit 2) naming the key.
func TestCaptureOptions(t *testing.T) {
	c, err := LoadConfig("", envMap(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Capture, (CaptureConfig{Enabled: false, Interval: time.Second, MaxSegmentBytes: 8 << 20, MaxBufferBytes: 32 << 20,
		Rollover: 24 * time.Hour, CompactionLevels: []string{"30s", "5m", "1h"}, CompactionGrace: 10 * time.Minute}); !reflect.DeepEqual(got, want) {
		t.Errorf("defaults = %+v, want %+v", got, want)
	}
	for _, tc := range []struct {
		name  string
		env   map[string]string
		flags map[string]string
		want  bool
	}{
		{"LIFEBOAT_CAPTURE", map[string]string{"LIFEBOAT_CAPTURE": "true"}, nil, true},
		{"LIFEBOAT_CAPTURE_ENABLED wins", map[string]string{"LIFEBOAT_CAPTURE": "true", "LIFEBOAT_CAPTURE_ENABLED": "false"}, nil, false},
		{"flag wins over env", map[string]string{"LIFEBOAT_CAPTURE": "false"}, map[string]string{"capture.enabled": "true"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := LoadConfig("", envMap(tc.env), tc.flags)
			if err != nil {
				t.Fatal(err)
			}
			if c.Capture.Enabled != tc.want {
				t.Errorf("capture.enabled = %v, want %v", c.Capture.Enabled, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, file, key, want string
	}{
		{"interval too short", "capture:\n  interval: 50ms\n", "capture.interval", "50ms: must be between 100ms and 1m0s"},
		{"interval too long", "capture:\n  interval: 2m\n", "capture.interval", "2m0s: must be between 100ms and 1m0s"},
		{"segment too small", "capture:\n  max_segment_bytes: 4KiB\n", "capture.max_segment_bytes", "must be between 64KiB and 256MiB"},
		{"segment too large", "capture:\n  max_segment_bytes: 1GiB\n", "capture.max_segment_bytes", "must be between 64KiB and 256MiB"},
		{"buffer below segment", "capture:\n  max_segment_bytes: 16MiB\n  max_buffer_bytes: 8MiB\n", "capture.max_buffer_bytes", "is below capture.max_segment_bytes"},
		{"buffer too large", "capture:\n  max_buffer_bytes: 8GiB\n", "capture.max_buffer_bytes", "must be at most 4GiB"},
		{"not a bool", "capture:\n  enabled: maybe\n", "enabled", "maybe"},
		{"compaction level not a duration", "capture:\n  compaction_levels: [30s, soon]\n", "capture.compaction_levels", `"soon" is not a duration`},
		{"compaction levels not multiples", "capture:\n  compaction_levels: [30s, 45s]\n", "capture.compaction_levels", "want a multiple of level 1's 30s"},
		{"compaction grace too short", "capture:\n  compaction_grace: 0s\n", "capture.compaction_grace", "must be at least 1s"},
		{"compaction level too short", "capture:\n  compaction_levels: [500ms]\n", "capture.compaction_levels", "want at least 1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadConfig(writeFile(t, "c.yaml", tc.file), envMap(nil), nil)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig: %v, want a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tc.key) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q: want it to name %s and say %q", err, tc.key, tc.want)
			}
		})
	}
}

// TestConfigCheckCapture: lifeboat config check prints the capture
// section with the effective values (here from flags and environment).
func TestConfigCheckCapture(t *testing.T) {
	code, out, errOut := runCLI(t, map[string]string{"LIFEBOAT_CAPTURE_ENABLED": "true"}, "config", "check", "--capture-interval", "1s", "--capture-max-buffer-bytes", "64MiB")
	if code != 0 {
		t.Fatalf("config check: exit %d: %s", code, errOut)
	}
	want := "capture:\n    enabled: true\n    interval: 1s\n    max_segment_bytes: 8388608\n    max_buffer_bytes: 67108864\n"
	if !strings.Contains(out, want) {
		t.Errorf("config check lacks\n%s\nin\n%s", want, out)
	}
}

// TestAgentCaptureRefused: agent --once with capture exits 2 saying that
// capture needs the daemon, before it touches etcd or the store; the
// daemon with --capture runs the capture job for real: a generation
// starts from a fresh snapshot, change segments are stored, /status shows
// the durable revision, and cancelling it exits 0.
func TestAgentCaptureRefused(t *testing.T) {
	store := "file://" + filepath.Join(t.TempDir(), "store")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"--once --capture", []string{"agent", "--once", "--capture"}, nil, "agent --once cannot capture"},
		{"--once, LIFEBOAT_CAPTURE", []string{"agent", "--once"}, map[string]string{"LIFEBOAT_CAPTURE": "true"}, "agent --once cannot capture"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--store", store, "--endpoints", "http://127.0.0.1:1")
			code, out, errOut := runCLI(t, tc.env, args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUsage, out, errOut)
			}
			if !strings.Contains(errOut, "capture.enabled") || !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr does not name capture.enabled and say %q:\n%s", tc.want, errOut)
			}
		})
	}
	t.Run("daemon", func(t *testing.T) {
		if testing.Short() {
			t.Skip("slow: real etcd")
		}
		c := etcdtest.Start(t, etcdtest.Options{Members: 1})
		cli := c.Client(t)
		dir := t.TempDir()
		addr := freeAddr(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		var stderr syncbuf.Buffer
		done := make(chan int, 1)
		go func() {
			done <- run(ctx, []string{"agent", "--capture", "--capture-interval", "200ms", "--cluster", "d",
				"--store", "file://" + filepath.Join(dir, "store"), "--spool-dir", filepath.Join(dir, "spool"),
				"--endpoints", c.Endpoints()[0], "--listen", addr, "--snapshot-schedule", "",
				"--prune-schedule", "", "--drill-schedule", "", "--lock-ttl", "5s", "--log-format", "json"}, io.Discard, &stderr)
		}()
		var st agent.Status
		var last int64
		deadline := time.Now().Add(time.Minute)
		for i := 0; st.Capture == nil || st.Capture.Revision < last || last == 0; i++ {
			if time.Now().After(deadline) {
				t.Fatalf("capture did not store revision %d within a minute: %+v\n%s", last, st.Capture, stderr.String())
			}
			select {
			case code := <-done:
				t.Fatalf("agent exited %d\n%s", code, stderr.String())
			case <-time.After(50 * time.Millisecond):
			}
			if st.Capture != nil && st.Capture.Generation != "" && last == 0 {
				r, err := cli.Put(t.Context(), "/k", "v")
				if err != nil {
					t.Fatal(err)
				}
				last = r.Header.Revision
			}
			st = agent.Status{}
			if resp, err := http.Get("http://" + addr + "/status"); err == nil {
				json.NewDecoder(resp.Body).Decode(&st)
				resp.Body.Close()
			}
		}
		if !st.Capture.Active || !st.Capture.Running || st.Capture.LastError != "" {
			t.Errorf("capture status %+v: want active and running, no error", st.Capture)
		}
		var segs int
		for _, f := range storeFiles(t, filepath.Join(dir, "store")) {
			if strings.HasPrefix(f, "d/changes/"+st.Capture.Generation+"/") && strings.HasSuffix(f, ".seg.zst") {
				segs++
			}
		}
		if segs == 0 {
			t.Errorf("no change segment of generation %s in the store: %v", st.Capture.Generation, storeFiles(t, filepath.Join(dir, "store")))
		}
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("exit %d after cancellation\n%s", code, stderr.String())
			}
		case <-time.After(time.Minute):
			t.Fatal("the agent did not stop")
		}
	})
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
