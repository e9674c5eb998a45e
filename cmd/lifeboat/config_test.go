package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"reflect"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func envMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestLoadConfigPrecedence(t *testing.T) {
	file := writeFile(t, "c.yaml", `
cluster: from-file
etcd:
  endpoints: [http://file:2379]
  user: alice
  password: file-secret
  dial_timeout: 3s
snapshot:
  stall_timeout: 10s
store:
  url: file:///srv/backups
`)
	tests := []struct {
		name  string
		env   map[string]string
		flags map[string]string
		check func(t *testing.T, c *Config)
	}{
		{
			name: "file only",
			check: func(t *testing.T, c *Config) {
				if got, want := c.Cluster, "from-file"; got != want {
					t.Errorf("cluster = %q, want %q", got, want)
				}
				if got, want := c.Etcd.DialTimeout, 3*time.Second; got != want {
					t.Errorf("dial_timeout = %v, want %v", got, want)
				}
				if got, want := c.Snapshot.SpoolDir, DefaultConfig().Snapshot.SpoolDir; got != want {
					t.Errorf("spool_dir = %q, want default %q", got, want)
				}
			},
		},
		{
			name: "env over file",
			env:  map[string]string{"LIFEBOAT_CLUSTER": "from-env", "ETCDCTL_ENDPOINTS": "http://a:2379,http://b:2379"},
			check: func(t *testing.T, c *Config) {
				if got, want := c.Cluster, "from-env"; got != want {
					t.Errorf("cluster = %q, want %q", got, want)
				}
				if diff := cmp.Diff(c.Etcd.Endpoints, []string{"http://a:2379", "http://b:2379"}); diff != "" {
					t.Errorf("endpoints (-got +want):\n%s", diff)
				}
			},
		},
		{
			name: "LIFEBOAT_ env wins over ETCDCTL_ env",
			env:  map[string]string{"LIFEBOAT_ETCD_ENDPOINTS": "http://l:2379", "ETCDCTL_ENDPOINTS": "http://e:2379"},
			check: func(t *testing.T, c *Config) {
				if diff := cmp.Diff(c.Etcd.Endpoints, []string{"http://l:2379"}); diff != "" {
					t.Errorf("endpoints (-got +want):\n%s", diff)
				}
			},
		},
		{
			name:  "flags over env",
			env:   map[string]string{"LIFEBOAT_CLUSTER": "from-env", "LIFEBOAT_SNAPSHOT_STALL_TIMEOUT": "20s"},
			flags: map[string]string{"cluster": "from-flag", "snapshot.writeback_chunk": "4MiB"},
			check: func(t *testing.T, c *Config) {
				if got, want := c.Cluster, "from-flag"; got != want {
					t.Errorf("cluster = %q, want %q", got, want)
				}
				if got, want := c.Snapshot.StallTimeout, 20*time.Second; got != want {
					t.Errorf("stall_timeout = %v, want %v", got, want)
				}
				if got, want := c.Snapshot.WritebackChunk, int64(4<<20); got != want {
					t.Errorf("writeback_chunk = %d, want %d", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadConfig(file, envMap(tt.env), tt.flags)
			if err != nil {
				t.Fatalf("LoadConfig: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestLoadConfigErrorsNameTheKey(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		env     map[string]string
		flags   map[string]string
		wantKey string
	}{
		{name: "unknown top-level key", file: "clustr: x\n", wantKey: "clustr"},
		{name: "unknown nested key", file: "etcd:\n  endpoint: [http://a:1]\n", wantKey: "endpoint"},
		{name: "wrong type", file: "etcd:\n  dial_timeout: [1, 2]\n", wantKey: "dial_timeout"},
		{name: "bad duration", file: "snapshot:\n  stall_timeout: soon\n", wantKey: "stall_timeout"},
		{name: "bad endpoint", file: "etcd:\n  endpoints: [\"ftp://127.0.0.1:2379\"]\n", wantKey: "etcd.endpoints"},
		{name: "bad yaml size", file: "snapshot:\n  writeback_chunk: lots\n", wantKey: "snapshot.writeback_chunk"},
		{name: "bad yaml duration in days", file: "snapshot:\n  timeout: 1x\n", wantKey: "snapshot.timeout"},
		{name: "unknown key in a merge", file: "base: &b {level: info}\nlog:\n  <<: *b\n  levle: x\n", wantKey: "base"},
		{name: "cert without key", file: "etcd:\n  cert: /c.pem\n", wantKey: "etcd.cert"},
		{name: "bad member", file: "etcd:\n  member: boss\n", wantKey: "etcd.member"},
		{name: "bad store url", file: "store:\n  url: ftp://x\n", wantKey: "store.url"},
		{name: "relative file store", file: "store:\n  url: file://backups\n", wantKey: "store.url"},
		{name: "bad compression", file: "store:\n  compression: lz4\n", wantKey: "store.compression"},
		{name: "bad log level", file: "log:\n  level: loud\n", wantKey: "log.level"},
		{name: "bad cluster name", file: "cluster: a/b\n", wantKey: "cluster"},
		{name: "bad env duration", env: map[string]string{"LIFEBOAT_ETCD_DIAL_TIMEOUT": "5 minutes"}, wantKey: "LIFEBOAT_ETCD_DIAL_TIMEOUT"},
		{name: "bad flag size", flags: map[string]string{"snapshot.writeback_chunk": "lots"}, wantKey: "snapshot.writeback_chunk"},
		{name: "negative changes_within", file: "retention:\n  changes_within: -1h\n", wantKey: "retention.changes_within"},
		{name: "bad changes_within", flags: map[string]string{"retention.changes_within": "a week"}, wantKey: "retention.changes_within"},
		{name: "not yaml", file: "etcd: [unclosed\n", wantKey: "c.yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, "c.yaml", tt.file)
			}
			_, err := LoadConfig(path, envMap(tt.env), tt.flags)
			if err == nil {
				t.Fatal("LoadConfig succeeded, want an error")
			}
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Errorf("error %q is not a *ConfigError (exit 2)", err)
			}
			if !strings.Contains(err.Error(), tt.wantKey) {
				t.Errorf("error %q does not name %q", err, tt.wantKey)
			}
		})
	}
}

func TestRedactedHidesSecrets(t *testing.T) {
	c, err := LoadConfig("", envMap(map[string]string{"ETCDCTL_USER": "root", "ETCDCTL_PASSWORD": "hunter2-very-secret"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Redacted()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("redacted config shows the password:\n%s", out)
	}
	if !strings.Contains(out, "redacted") {
		t.Errorf("redacted config does not mark the password as redacted:\n%s", out)
	}
	if got := c.Etcd.Password.Reveal(); got != "hunter2-very-secret" {
		t.Errorf("password = %q after load", got)
	}
}

// TestOptionTable: the table names every leaf key of Config exactly once,
// each with a flag and a LIFEBOAT_* variable of its own, and every default
// parses.
func TestOptionTable(t *testing.T) {
	var leaves []string
	var walk func(prefix string, v reflect.Type)
	walk = func(prefix string, v reflect.Type) {
		for i := 0; i < v.NumField(); i++ {
			key := yamlName(v.Field(i))
			if prefix != "" {
				key = prefix + "." + key
			}
			if ft := v.Field(i).Type; ft.Kind() == reflect.Struct {
				walk(key, ft)
				continue
			}
			leaves = append(leaves, key)
		}
	}
	walk("", reflect.TypeOf(Config{}))
	var keys []string
	flags, envs := map[string]string{}, map[string]string{}
	var c Config
	for _, o := range options(&c) {
		keys = append(keys, o.key)
		if !o.field.IsValid() {
			t.Errorf("key %s names no field of Config", o.key)
			continue
		}
		if o.Flag == "" || o.Help == "" || o.Groups == 0 {
			t.Errorf("key %s: flag %q, help %q, groups %b: all are needed", o.key, o.Flag, o.Help, o.Groups)
		}
		if prev, ok := flags[o.Flag]; ok {
			t.Errorf("flag --%s is both %s and %s", o.Flag, prev, o.key)
		}
		flags[o.Flag] = o.key
		for _, e := range o.envNames() {
			if prev, ok := envs[e]; ok {
				t.Errorf("environment %s is both %s and %s", e, prev, o.key)
			}
			envs[e] = o.key
			if strings.ContainsAny(e, ".-") {
				t.Errorf("environment name %q for %s", e, o.key)
			}
		}
		if o.Default != "" {
			if err := o.set(o.Default); err != nil {
				t.Errorf("default of %s: %v", o.key, err)
			}
		}
	}
	if diff := cmp.Diff(leaves, keys); diff != "" {
		t.Errorf("option table keys vs Config's leaves, in file order (-Config +table):\n%s", diff)
	}
	if err := func() error { c := DefaultConfig(); c.normalize(); return c.Validate() }(); err != nil {
		t.Errorf("the defaults do not validate: %v", err)
	}
}

// yamlInternals are go-yaml's words for types (cannot unmarshal !!str
// `x` into int, main.EtcdConfig): an error a user reads says types in words.
var yamlInternals = regexp.MustCompile("cannot (unmarshal|use) !!|into (main\\.|\\[\\]|int|bool|string)")

// FuzzLoadConfig feeds arbitrary YAML to the loader: it must return a
// config or an error in words (never go-yaml's internals), never panic.
func FuzzLoadConfig(f *testing.F) {
	seeds := []string{
		"",
		"cluster: prod\n",
		"etcd:\n  endpoints: [https://10.0.0.1:2379]\n  cacert: /ca.pem\n  cert: /c.pem\n  key: /k.pem\n",
		"snapshot:\n  stall_timeout: 30s\n  writeback_chunk: 8388608\n",
		"store:\n  url: s3://bucket/prefix\n  compression: none\n",
		"encryption:\n  recipients: [age1abc]\n",
		"etcd: {endpoints: 5}\n",
		"- a\n- b\n",
		"log: &a {level: *a}\n",
		"snapshot:\n  writeback_chunk: 8MiB\n  timeout: 1d\nstore:\n  url: s3://bucket/prefix/\n",
		"etcd:\n  endpoints: [127.0.0.1:2379]\n  member: 10.0.0.1:2379\n",
		"log: &l {level: debug}\nagent:\n  <<: *l\n",
		"notify:\n  webhooks: [\"https://h/x?a=1,2\"]\n",
		"copies:\n  - {name: dr, url: s3://dr/x, s3: {part_size: 8MiB}, object_lock: {mode: GOVERNANCE, retain: 30d}, retention: {keep_last: 3}}\n",
		"copies:\n  - name: a\n    url: file:///a\n    s3:\n      s3: {x: 1}\n",
		"copies: [{name: a, url: file:///a}, {name: a}]\ndrill: {store: alternate}\n",
		"copies: {name: a}\n",
		"copies:\n  - [1, 2]\n",
	}
	for _, s := range seeds {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, s string) {
		p := filepath.Join(dir, "fuzz.yaml")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(p, envMap(nil), nil)
		if err != nil && yamlInternals.MatchString(err.Error()) {
			t.Fatalf("error in go-yaml's words, not the user's: %v", err)
		}
		if err == nil {
			if verr := c.Validate(); verr != nil {
				t.Fatalf("LoadConfig returned a config that does not validate: %v", verr)
			}
		}
	})
}

// TestEveryCommandsFlagsAreItsGroups: each command has the flags of its
// option groups and no others; every option flag maps to a key.
func TestEveryCommandsFlagsAreItsGroups(t *testing.T) {
	root := newRootCmd(nil, nil)
	byFlag := map[string]*optionDef{}
	for i := range optionTable {
		byFlag[optionTable[i].Flag] = &optionTable[i]
	}
	tests := []struct {
		args      []string
		want, not []string
	}{
		{args: []string{"snapshot"}, want: []string{"endpoints", "cacert", "store", "s3-part-size", "recipient", "spool-dir", "timeout", "live-hashkv", "cluster"},
			not: []string{"keep-last", "listen", "webhook", "scratch-dir", "snapshot-schedule"}},
		{args: []string{"list"}, want: []string{"store", "cluster", "s3-endpoint"}, not: []string{"endpoints", "keep-last", "recipient"}},
		{args: []string{"prune"}, want: []string{"store", "keep-last", "keep-within", "orphan-grace"}, not: []string{"endpoints", "listen"}},
		{args: []string{"drill"}, want: []string{"store", "identity-file", "scratch-dir", "check-prefix", "spool-dir"}, not: []string{"endpoints", "keep-last", "listen"}},
		{args: []string{"restore"}, want: []string{"store", "identity-file", "scratch-dir", "spool-dir"}, not: []string{"endpoints", "keep-last"}},
		{args: []string{"agent"}, want: []string{"endpoints", "store", "keep-last", "listen", "webhook", "snapshot-schedule", "scratch-dir"}},
		{args: []string{"config", "check"}, want: []string{"endpoints", "store", "keep-last", "listen", "webhook"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			c, _, err := root.Find(tt.args)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tt.want {
				if c.Flags().Lookup(f) == nil {
					t.Errorf("no --%s", f)
				}
			}
			for _, f := range tt.not {
				if fl := c.Flags().Lookup(f); fl != nil && !fl.Hidden {
					t.Errorf("--%s is not %s's: its help shows it", f, c.Name())
				}
			}
			c.Flags().VisitAll(func(f *pflag.Flag) {
				d, ok := byFlag[f.Name]
				if !ok {
					return // the command's own
				}
				switch {
				case commandGroups[c.Name()].shows(d.Groups):
					if f.Hidden {
						t.Errorf("--%s (%s) is %s's but hidden", f.Name, d.Key, c.Name())
					}
				case d.Groups&(sharedGroups|commandGroups[c.Name()]) != 0 || slices.Contains(commandKeys[c.Name()], d.Key):
					if !f.Hidden {
						t.Errorf("--%s (%s) is shown by %s, whose groups it is not in", f.Name, d.Key, c.Name())
					}
				default:
					t.Errorf("--%s (%s) is outside %s's groups", f.Name, d.Key, c.Name())
				}
			})
		})
	}
	root.PersistentFlags().VisitAll(func(f *pflag.Flag) {
		if _, ok := byFlag[f.Name]; !ok && f.Name != "config" {
			t.Errorf("global flag --%s maps to no config key: it would be ignored", f.Name)
		}
	})
}
