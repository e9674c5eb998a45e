package main

import (
	"errors"
	"strings"
	"testing"
)

// TestOrphanGraceFloor: retention.orphan_grace below the longest a
// snapshot job can run, (agent.snapshot_retries + 1) × snapshot.timeout
// plus the retry backoff, is refused (exit 2), saying the floor and how it
// is derived; 0s used to be accepted, and prune then removed the data
// object of a backup whose manifest was about to be written.
func TestOrphanGraceFloor(t *testing.T) {
	tests := []struct {
		name string
		file string
		// wantFloor is "" when the config is valid.
		wantFloor string
	}{
		{name: "0s with the defaults", file: "retention:\n  orphan_grace: 0s\n", wantFloor: "1h30m30s"},
		{name: "an hour with the defaults", file: "retention:\n  orphan_grace: 1h\n", wantFloor: "1h30m30s"},
		{name: "the default grace", file: ""},
		{name: "just below the floor", file: "snapshot:\n  timeout: 2m\nagent:\n  snapshot_retries: 0\nretention:\n  orphan_grace: 1m59s\n", wantFloor: "2m0s"},
		{name: "at the floor", file: "snapshot:\n  timeout: 2m\nagent:\n  snapshot_retries: 0\nretention:\n  orphan_grace: 2m\n"},
		{name: "one retry", file: "snapshot:\n  timeout: 2m\nagent:\n  snapshot_retries: 1\nretention:\n  orphan_grace: 4m\n", wantFloor: "4m10s"},
		{name: "no snapshot timeout", file: "snapshot:\n  timeout: 0s\nretention:\n  orphan_grace: 23h\n", wantFloor: "24h0m0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, "c.yaml", tt.file)
			}
			_, err := LoadConfig(path, envMap(nil), nil)
			if tt.wantFloor == "" {
				if err != nil {
					t.Fatalf("LoadConfig: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("LoadConfig succeeded, want the grace refused")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %q is not a *ConfigError (exit 2)", err)
			}
			for _, want := range []string{"retention.orphan_grace", "floor " + tt.wantFloor, "snapshot.timeout", "agent.snapshot_retries"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}
