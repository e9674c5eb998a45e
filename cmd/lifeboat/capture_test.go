package main

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCaptureOptions: the capture keys' defaults, their environment names
// (LIFEBOAT_CAPTURE as well as LIFEBOAT_CAPTURE_ENABLED, which wins), and
// their bounds, each refused with a *ConfigError (exit 2) naming the key.
func TestCaptureOptions(t *testing.T) {
	c, err := LoadConfig("", envMap(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Capture, (CaptureConfig{Enabled: false, Interval: 5 * time.Second, MaxSegmentBytes: 8 << 20, MaxBufferBytes: 32 << 20}); got != want {
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

// TestAgentCaptureRefused: agent --once with capture exits 2 saying that
// capture needs the daemon, before it touches etcd or the store; and, until
// the capture job is wired into this build, the daemon refuses it too rather
// than run without it.
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
		{"daemon", []string{"agent", "--capture", "--listen", "127.0.0.1:0"}, nil, "no capture job yet"},
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
}
