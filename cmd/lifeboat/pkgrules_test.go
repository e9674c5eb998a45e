package main

import (
	"errors"
	"strings"
	"testing"
)

// TestValidateKeysPackageRules pins the messages of the rules the
// configuration takes from the packages (agent, restore, repository,
// uploader, snapshot): the error names the key, is a *ConfigError (exit 2),
// reads as it did when the rule lived here (at the key's line, FILE the
// file's path), and holds no webhook secret.
func TestValidateKeysPackageRules(t *testing.T) {
	for _, tc := range []struct {
		name, file, want string
	}{
		{"notify.webhooks", "notify:\n  webhooks: [\"https://a.example/x\", \"ftp://tok3n@b.example/x\"]\n", "config FILE:2: notify.webhooks: entry 2 is not an http(s) URL"},
		{"notify.on", "notify:\n  on: [stale, backup_done]\n", `config FILE:2: notify.on: "backup_done" is not drill_failed, snapshot_failed, prune_failed or stale`},
		{"drill.check_prefixes", "drill:\n  check_prefixes: [\"/registry/\", \"\"]\n", "config FILE:2: drill.check_prefixes: empty prefix"},
		{"store.compression", "store:\n  compression: lz4\n", `config FILE:2: store.compression: "lz4" is not zstd, s2 or none`},
		{"store.object_lock.mode", "store:\n  object_lock:\n    mode: governance\n    retain: 30d\n", `config FILE:3: store.object_lock.mode: "governance" is not GOVERNANCE or COMPLIANCE`},
		{"agent.lock_ttl", "agent:\n  lock_ttl: 4s\n", "config FILE:2: agent.lock_ttl: must be at least 5s"},
		{"snapshot.live_hashkv", "snapshot:\n  live_hashkv: sometimes\n", `config FILE:2: snapshot.live_hashkv: "sometimes" is not "always", "auto" or "defer"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "c.yaml", tc.file)
			_, err := LoadConfig(path, envMap(nil), nil)
			if want := strings.ReplaceAll(tc.want, "FILE", path); err == nil || err.Error() != want {
				t.Fatalf("LoadConfig: got error %v, want %q", err, want)
			}
			if ce := (*ConfigError)(nil); !errors.As(err, &ce) || ce.Key != tc.name {
				t.Errorf("error %q: not a *ConfigError with key %q", err, tc.name)
			}
			if strings.Contains(err.Error(), "tok3n") {
				t.Errorf("error %q holds the webhook's secret", err)
			}
		})
	}
}
