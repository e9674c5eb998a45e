package main

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestConfigAgreesWithThePackages: a value the configuration accepts is one
// the package that consumes it accepts, and the reverse. Each concept
// (etcd endpoint, store URL, cron schedule) has one parser, in the package
// that uses the value; the configuration calls it.
func TestConfigAgreesWithThePackages(t *testing.T) {
	accepts := func(key, value string) bool {
		_, err := LoadConfig("", envMap(nil), map[string]string{key: value})
		return err == nil
	}
	t.Run("etcd endpoint", func(t *testing.T) {
		for _, ep := range []string{
			"http://127.0.0.1:2379", "https://etcd-0.etcd:2379", "unix:///run/etcd.sock",
			"unixs:///run/etcd.sock", "unix:etcd.sock", "http://", "https://", "ftp://127.0.0.1:2379",
		} {
			pkg := (snapshot.Config{Endpoints: []string{ep}}).Validate() == nil
			if cfg := accepts("etcd.endpoints", ep); cfg != pkg {
				t.Errorf("endpoint %q: config accepts %v, snapshot accepts %v", ep, cfg, pkg)
			}
		}
	})
	t.Run("etcd connection", func(t *testing.T) {
		for _, tc := range []struct {
			name  string
			flags map[string]string
		}{
			{"member among the endpoints", map[string]string{"etcd.endpoints": "http://a:2379,http://b:2379", "etcd.member": "http://b:2379"}},
			{"member not among the endpoints", map[string]string{"etcd.endpoints": "http://a:2379", "etcd.member": "http://elsewhere:2379"}},
			{"an endpoint twice", map[string]string{"etcd.endpoints": "http://a:2379,http://a:2379/"}},
			{"user without password", map[string]string{"etcd.user": "root"}},
			{"user and password", map[string]string{"etcd.user": "root", "etcd.password": "pw"}},
		} {
			c, err := LoadConfig("", envMap(nil), tc.flags)
			if err != nil {
				c2 := DefaultConfig()
				c = &c2
				for _, o := range options(c) {
					if v, ok := tc.flags[o.key]; ok {
						if err := o.set(v); err != nil {
							t.Fatal(err)
						}
					}
				}
				c.normalize()
			}
			cfg, pkg := err == nil, etcdConfig(c).Validate() == nil
			if cfg != pkg {
				t.Errorf("%s: config accepts %v, snapshot accepts %v", tc.name, cfg, pkg)
			}
		}
	})
	t.Run("s3 store URL", func(t *testing.T) {
		for _, u := range []string{
			"s3://bucket", "s3://bucket/a/b/", "s3://bucket//p", "s3://bucket/p?versionId=1",
			"s3://bucket/p#frag", "s3://Bucket/p", "s3://bucket/a//b",
		} {
			_, pkgErr := uploader.ParseStoreURL(u)
			if cfg, pkg := accepts("store.url", u), pkgErr == nil; cfg != pkg {
				t.Errorf("store URL %q: config accepts %v, uploader accepts %v", u, cfg, pkg)
			}
		}
	})
	t.Run("cron schedule", func(t *testing.T) {
		for _, s := range []string{
			"@every 30m", "@daily", "0 3 * * *", "*/10 * * * * *", "CRON_TZ=Europe/Berlin 0 3 * * *",
			"@every -1m", "0 3 * *", "61 * * * *", "@fortnightly",
		} {
			_, pkgErr := agent.ParseSchedule(s)
			if cfg, pkg := accepts("schedule.snapshot", s), pkgErr == nil; cfg != pkg {
				t.Errorf("schedule %q: config accepts %v, agent accepts %v", s, cfg, pkg)
			}
		}
	})
}
