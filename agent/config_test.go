package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestNewRefusesBadConfig checks that the agent, called as a library,
// refuses the values the configuration refuses (notify.webhooks, notify.on,
// schedule.jitter, agent.snapshot_retries, agent.lock_ttl), before it binds or dials
// anything, and that the webhook's URL never appears in the error.
func TestNewRefusesBadConfig(t *testing.T) {
	st, err := uploader.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	backups := repository.New(st, "c")
	const secretURL = "ftp://user:s3cret@hooks.example/x"
	for _, tc := range []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"webhook scheme", func(c *Config) { c.Notify.Webhooks = []snapshot.Secret{"https://ok.example/", secretURL} }, "notify webhooks: entry 2 is not an http(s) URL"},
		{"webhook without host", func(c *Config) { c.Notify.Webhooks = []snapshot.Secret{"https:///path"} }, "notify webhooks: entry 1 is not an http(s) URL"},
		{"unknown event", func(c *Config) { c.Notify.On = []string{EventStale, "backup_done"} }, `notify on: "backup_done" is not drill_failed, snapshot_failed, prune_failed or stale`},
		{"negative notify timeout", func(c *Config) { c.Notify.Timeout = -time.Second }, "notify timeout -1s: must not be negative"},
		{"negative notify attempts", func(c *Config) { c.Notify.Attempts = -1 }, "notify attempts -1: must not be negative"},
		{"negative jitter", func(c *Config) { c.Jitter = -time.Second }, "jitter -1s: must not be negative"},
		{"lock TTL below MinLockTTL", func(c *Config) { c.Lock = &LockConfig{TTL: MinLockTTL - time.Second} }, "lock TTL 4s: must be at least 5s"},
		{"negative snapshot retries", func(c *Config) { c.SnapshotRetries = -1 }, "snapshot retries -1: must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Backups: backups, Registry: NewRegistry()}
			tc.edit(&cfg)
			_, err := New(cfg, nil)
			if err == nil {
				t.Fatalf("New accepted the config; want an error containing %q", tc.want)
			}
			if got := err.Error(); !strings.Contains(got, tc.want) {
				t.Errorf("New: got %q, want it to contain %q", got, tc.want)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Errorf("New: error %q holds the webhook's secret", err)
			}
		})
	}
}
