package main

import (
	"fmt"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"
)

// source is one way of setting a key: the YAML file, the environment or a
// flag, each through `lifeboat config check`, the way a user sets it.
type source string

const (
	fromYAML source = "yaml"
	fromEnv  source = "env"
	fromFlag source = "flag"
)

// setting is one key's value and the flag that sets it.
type setting struct {
	key, flag string
	value     string
	list      []string // for list keys: the YAML list (value is the env/flag form)
}

// effective runs config check with the settings from src and returns the
// printed configuration, parsed.
func effective(t *testing.T, src source, settings ...setting) (map[string]any, int, string) {
	t.Helper()
	env := map[string]string{}
	var args []string
	file := map[string]any{}
	for _, s := range settings {
		switch src {
		case fromEnv:
			env[envName(s.key)] = s.value
		case fromFlag:
			if s.list != nil {
				for _, v := range s.list {
					args = append(args, "--"+s.flag, v)
				}
			} else {
				args = append(args, "--"+s.flag, s.value)
			}
		case fromYAML:
			parts := strings.Split(s.key, ".")
			m := file
			for _, p := range parts[:len(parts)-1] {
				if _, ok := m[p]; !ok {
					m[p] = map[string]any{}
				}
				m = m[p].(map[string]any)
			}
			if s.list != nil {
				m[parts[len(parts)-1]] = s.list
			} else {
				m[parts[len(parts)-1]] = s.value
			}
		}
	}
	if src == fromYAML {
		b, err := yaml.Marshal(file)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", writeFile(t, "c.yaml", string(b)))
	}
	code, out, errOut := runCLI(t, env, append([]string{"config", "check"}, args...)...)
	if code != 0 {
		return nil, code, errOut
	}
	var got map[string]any
	if err := yaml.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("config check output is not YAML: %v\n%s", err, out)
	}
	return got, code, errOut
}

func lookup(m map[string]any, key string) any {
	var v any = m
	for _, p := range strings.Split(key, ".") {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[p]
	}
	return v
}

// TestEtcdctlConventions (item 15): what etcdctl and its scripts write is
// accepted alike from the YAML file, the environment and flags.
func TestEtcdctlConventions(t *testing.T) {
	// config check opens the CA (issue 29): a real one.
	ca, _, _ := etcdtest.OtherCA(t)
	tls := []setting{{key: "etcd.cacert", flag: "cacert", value: ca}}
	tests := []struct {
		name     string
		settings []setting
		key      string
		want     any
	}{
		{name: "endpoint without a scheme is http", settings: []setting{{key: "etcd.endpoints", flag: "endpoints", value: "127.0.0.1:2379,10.0.0.2:2379", list: []string{"127.0.0.1:2379", "10.0.0.2:2379"}}},
			key: "etcd.endpoints", want: []any{"http://127.0.0.1:2379", "http://10.0.0.2:2379"}},
		{name: "endpoint without a scheme is https with TLS flags", settings: append([]setting{{key: "etcd.endpoints", flag: "endpoints", value: "127.0.0.1:2379", list: []string{"127.0.0.1:2379"}}}, tls...),
			key: "etcd.endpoints", want: []any{"https://127.0.0.1:2379"}},
		{name: "endpoint with a scheme is kept", settings: append([]setting{{key: "etcd.endpoints", flag: "endpoints", value: "http://127.0.0.1:2379", list: []string{"http://127.0.0.1:2379"}}}, tls...),
			key: "etcd.endpoints", want: []any{"http://127.0.0.1:2379"}},
		{name: "member without a scheme", settings: []setting{{key: "etcd.member", flag: "member", value: "10.0.0.2:2379"},
			// The member must be one of the endpoints (snapshot's rule).
			{key: "etcd.endpoints", flag: "endpoints", value: "127.0.0.1:2379,10.0.0.2:2379", list: []string{"127.0.0.1:2379", "10.0.0.2:2379"}}},
			key: "etcd.member", want: "http://10.0.0.2:2379"},
		{name: "s3 URL with a trailing slash", settings: []setting{{key: "store.url", flag: "store", value: "s3://bucket/prefix/"}},
			key: "store.url", want: "s3://bucket/prefix/"},
		{name: "size with a unit", settings: []setting{{key: "snapshot.writeback_chunk", flag: "writeback-chunk", value: "8MiB"}},
			key: "snapshot.writeback_chunk", want: 8 << 20},
		{name: "size with a short unit", settings: []setting{{key: "store.url", flag: "store", value: "s3://bkt"}, {key: "store.s3.part_size", flag: "s3-part-size", value: "64M"}},
			key: "store.s3.part_size", want: 64 << 20},
		{name: "S3 part size with a unit", settings: []setting{{key: "store.url", flag: "store", value: "s3://bkt"}, {key: "store.s3.part_size", flag: "s3-part-size", value: "16MiB"}},
			key: "store.s3.part_size", want: 16 << 20},
		{name: "duration in days", settings: []setting{{key: "snapshot.timeout", flag: "timeout", value: "1d"},
			// A day-long snapshot raises the orphan grace's floor past its default.
			{key: "retention.orphan_grace", flag: "orphan-grace", value: "4d"}},
			key: "snapshot.timeout", want: (24 * time.Hour).String()},
		{name: "retention duration in days", settings: []setting{{key: "retention.keep_within", flag: "keep-within", value: "1d"}},
			key: "retention.keep_within", want: (24 * time.Hour).String()},
		{name: "go duration", settings: []setting{{key: "agent.stale_after", flag: "stale-after", value: "1h30m"}},
			key: "agent.stale_after", want: (90 * time.Minute).String()},
	}
	for _, tt := range tests {
		for _, src := range []source{fromYAML, fromEnv, fromFlag} {
			t.Run(tt.name+"/"+string(src), func(t *testing.T) {
				got, code, errOut := effective(t, src, tt.settings...)
				if code != 0 {
					t.Fatalf("config check exit %d: %s", code, errOut)
				}
				if diff := cmp.Diff(tt.want, lookup(got, tt.key)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", tt.key, diff)
				}
			})
		}
	}
}

// TestWebhookWithAComma (item 15): a webhook URL holding a comma can be
// set through the environment (and flags), and several URLs still split.
func TestWebhookWithAComma(t *testing.T) {
	tests := []struct {
		name  string
		value string
		list  []string
		want  int
	}{
		{name: "one URL with commas", value: "https://hooks.example/x?ids=1,2,3", list: []string{"https://hooks.example/x?ids=1,2,3"}, want: 1},
		{name: "two URLs", value: "https://a.example/x?ids=1,2, http://b.example/y", list: []string{"https://a.example/x?ids=1,2", "http://b.example/y"}, want: 2},
	}
	for _, tt := range tests {
		for _, src := range []source{fromYAML, fromEnv, fromFlag} {
			t.Run(tt.name+"/"+string(src), func(t *testing.T) {
				got, code, errOut := effective(t, src, setting{key: "notify.webhooks", flag: "webhook", value: tt.value, list: tt.list})
				if code != 0 {
					t.Fatalf("config check exit %d: %s", code, errOut)
				}
				hooks, _ := lookup(got, "notify.webhooks").([]any)
				if len(hooks) != tt.want {
					t.Errorf("%d webhooks, want %d: %v", len(hooks), tt.want, hooks)
				}
			})
		}
	}
	c, err := LoadConfig("", envMap(map[string]string{"LIFEBOAT_NOTIFY_WEBHOOKS": "https://a.example/x?ids=1,2,https://b.example/y"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	var urls []string
	for _, w := range c.Notify.Webhooks {
		urls = append(urls, w.Reveal())
	}
	if diff := cmp.Diff([]string{"https://a.example/x?ids=1,2", "https://b.example/y"}, urls); diff != "" {
		t.Errorf("webhooks (-want +got):\n%s", diff)
	}
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "8MiB", "16 MiB", "1GiB", "8M", "64 M", "1T", "-1", "9223372036854775807", "9GiB", "99999999999GiB", "KiB", "1.5MiB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSize(s)
		if err == nil && strings.HasSuffix(s, "iB") && n != 0 && n%1024 != 0 {
			t.Errorf("parseSize(%q) = %d, not a multiple of its unit", s, n)
		}
	})
}

func FuzzEndpoint(f *testing.F) {
	for _, s := range []string{"127.0.0.1:2379", "http://a:1", "https://[::1]:2379", "unix:///x", "", ":", "a b"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, tls bool) {
		got := withScheme(s, tls)
		if got != s && !strings.HasPrefix(got, "http://") && !strings.HasPrefix(got, "https://") {
			t.Errorf("withScheme(%q) = %q", s, got)
		}
		if again := withScheme(got, tls); again != got {
			t.Errorf("withScheme is not idempotent: %q -> %q -> %q", s, got, again)
		}
	})
}

func FuzzSplitURLs(f *testing.F) {
	for _, s := range []string{"https://a/x?i=1,2", "http://a,http://b", " , ,", "https://a/,, https://b/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parts := splitURLs(s)
		for i, p := range parts {
			if p == "" || p != strings.TrimSpace(p) {
				t.Errorf("splitURLs(%q) gave %q", s, p)
			}
			if l := strings.ToLower(p); i > 0 && !strings.HasPrefix(l, "http://") && !strings.HasPrefix(l, "https://") {
				t.Errorf("splitURLs(%q) split inside a URL: %q", s, fmt.Sprint(parts))
			}
		}
		if len(parts) > strings.Count(s, "://")+1 {
			t.Errorf("splitURLs(%q) = %q: more parts than URLs", s, fmt.Sprint(parts))
		}
	})
}
