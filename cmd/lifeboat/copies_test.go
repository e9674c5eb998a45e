package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCopiesConfig(t *testing.T) {
	dir := t.TempDir()
	good := "store:\n  url: file://" + dir + "/primary\ncopies:\n" +
		"  - name: dr\n    url: s3://dr-bucket/lifeboat\n    s3:\n      endpoint: http://127.0.0.1:9000\n      path_style: true\n      part_size: 16MiB\n      profile: dr\n" +
		"    object_lock: {mode: GOVERNANCE, retain: 30d}\n    retention: {keep_daily: 30, changes_within: 2d}\n" +
		"  - name: local-2\n    url: file://" + dir + "/second\n"

	t.Run("file", func(t *testing.T) {
		c, err := LoadConfig(writeFile(t, "c.yaml", good), envMap(nil), nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(c.Copies) != 2 {
			t.Fatalf("copies %+v", c.Copies)
		}
		dr := c.Copies[0]
		if dr.S3 == nil || dr.S3.PartSize != 16<<20 || dr.S3.Profile != "dr" || time.Duration(dr.ObjectLock.Retain) != 30*24*time.Hour {
			t.Errorf("dr %+v s3 %+v", dr, dr.S3)
		}
		if p := c.copyPolicy(dr); p == nil || p.Daily != 30 || p.ChangesWithin != 48*time.Hour {
			t.Errorf("dr's policy %+v", p)
		}
		if p := c.copyPolicy(c.Copies[1]); p != nil {
			t.Errorf("local-2 has the primary's (empty) policy, got %+v", p)
		}
		// A copy keeps replaced change segments as long as capture keeps
		// them in the primary.
		if g := c.copyJob(nil, copyStore{cfg: dr}).Grace; g != c.Capture.CompactionGrace || g != 10*time.Minute {
			t.Errorf("dr's copy job keeps replaced segments %s, capture.compaction_grace is %s", g, c.Capture.CompactionGrace)
		}
		out, err := c.Redacted()
		if err != nil || !strings.Contains(out, "name: dr") || !strings.Contains(out, "url: s3://dr-bucket/lifeboat") {
			t.Errorf("config check shows:\n%s\n%v", out, err)
		}
	})

	t.Run("flags and environment", func(t *testing.T) {
		c, err := LoadConfig(writeFile(t, "c.yaml", good), envMap(map[string]string{"LIFEBOAT_COPIES": "file:///a, file:///b"}), nil)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{c.Copies[0].Name + " " + c.Copies[0].URL, c.Copies[1].Name + " " + c.Copies[1].URL}
		if diff := cmp.Diff(got, []string{"copy1 file:///a", "copy2 file:///b"}); diff != "" {
			t.Errorf("env copies (-got +want):\n%s", diff)
		}
		c, err = LoadConfig("", envMap(nil), map[string]string{"copies": "s3://other-bucket/x"})
		if err != nil || len(c.Copies) != 1 || c.Copies[0].Name != "copy1" || c.copyS3(c.Copies[0]) != c.Store.S3 {
			t.Errorf("flag copies %+v: %v", c.Copies, err)
		}
	})

	t.Run("--store of a copy reads the copy with its settings", func(t *testing.T) {
		c, err := LoadConfig(writeFile(t, "c.yaml", good), envMap(nil), map[string]string{"store.url": "s3://dr-bucket/lifeboat/"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Store.S3.Profile != "dr" || c.Store.S3.Endpoint != "http://127.0.0.1:9000" || c.Store.ObjectLock.Mode != "GOVERNANCE" || c.Retention.KeepDaily != 30 {
			t.Errorf("store %+v, retention %+v: not the copy's settings", c.Store, c.Retention)
		}
		if len(c.Copies) != 1 || c.Copies[0].Name != "local-2" {
			t.Errorf("copies %+v, want local-2 only", c.Copies)
		}
	})

	bad := []struct {
		name, file, wantKey, wantText string
	}{
		{"duplicate names", "copies:\n  - {name: dr, url: file:///a}\n  - {name: dr, url: file:///b}\n", "copies[1].name", "unique"},
		{"no name", "copies:\n  - {url: file:///a}\n", "copies[0].name", "give a name"},
		{"name with capitals", "copies:\n  - {name: DR, url: file:///a}\n", "copies[0].name", "lower-case"},
		{"reserved name", "copies:\n  - {name: primary, url: file:///a}\n", "copies[0].name", "reserved"},
		{"bad url", "copies:\n  - {name: dr, url: ftp://x}\n", "copies[0].url", "not a file:///path or s3://bucket/prefix"},
		{"relative dir", "copies:\n  - {name: dr, url: file://backups}\n", "copies[0].url", "absolute path"},
		{"the primary", "copies:\n  - {name: dr, url: file:///var/lib/lifeboat/backups/}\n", "copies[0].url", "same store as the primary"},
		{"two copies the same", "copies:\n  - {name: a, url: s3://bkt/x}\n  - {name: b, url: s3://bkt/x/}\n", "copies[1].url", "same store as copy a"},
		{"unknown key", "copies:\n  - {name: dr, url: file:///a, retension: {keep_last: 1}}\n", "copies[0].retension", "unknown key"},
		{"unknown nested key", "copies:\n  - name: dr\n    url: s3://bkt/x\n    s3: {endpont: http://h}\n", "copies[0].s3.endpont", "unknown key"},
		{"lock on a directory", "copies:\n  - {name: dr, url: file:///a, object_lock: {mode: GOVERNANCE, retain: 1d}}\n", "copies[0].object_lock.mode", "needs an s3"},
		{"lock without retain", "copies:\n  - {name: dr, url: s3://bkt/x, object_lock: {mode: GOVERNANCE}}\n", "copies[0].object_lock.retain", "must be set"},
		{"retention keeps nothing", "copies:\n  - {name: dr, url: file:///a, retention: {time_zone: UTC}}\n", "copies[0].retention", "keeps nothing"},
		{"bad s3 setting", "copies:\n  - name: dr\n    url: s3://bkt/x\n    s3: {part_size: 1MiB}\n", "copies[0]", "s3.part_size"},
		{"bad size", "copies:\n  - name: dr\n    url: s3://bkt/x\n    s3: {part_size: lots}\n", "copies[0].s3.part_size", "is not a size"},
		{"drill store unknown", "drill: {store: dr}\n", "drill.store", "not primary, alternate or the name of a copy"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(writeFile(t, "c.yaml", tt.file), envMap(nil), nil)
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LoadConfig: %v, want a *ConfigError", err)
			}
			if !strings.Contains(err.Error(), tt.wantKey) || !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not name %q with %q", err, tt.wantKey, tt.wantText)
			}
		})
	}

	t.Run("credentials in a copy's URL are refused, never shown", func(t *testing.T) {
		for _, src := range []struct{ file, env string }{
			{file: "copies:\n  - {name: dr, url: \"s3://AKIA:" + marker + "@bucket/x\"}\n"},
			{env: "s3://AKIA:" + marker + "@bucket/x"},
		} {
			path := ""
			if src.file != "" {
				path = writeFile(t, "c.yaml", src.file)
			}
			_, err := LoadConfig(path, envMap(map[string]string{"LIFEBOAT_COPIES": src.env}), nil)
			if err == nil || !strings.Contains(err.Error(), "credentials in the store URL are not allowed") {
				t.Errorf("LoadConfig: %v", err)
			} else {
				assertNoMarker(t, "config error", err.Error())
			}
		}
		code, out, errOut := runCLI(t, nil, "copy", "--copy", "s3://AKIA:"+marker+"@bucket/x")
		if code != 2 {
			t.Errorf("copy with credentials in --copy: exit %d", code)
		}
		assertNoMarker(t, "copy's output", out+errOut)
	})
}

func TestCopyCommandUsage(t *testing.T) {
	store := filepath.Join(t.TempDir(), "store")
	if err := os.MkdirAll(store, 0o700); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, nil, "copy", "--store", "file://"+store)
	if code != 2 || !strings.Contains(errOut, "no copies configured") {
		t.Errorf("copy without copies: exit %d\n%s", code, errOut)
	}
}

// FuzzCopiesEnv feeds LIFEBOAT_COPIES arbitrary text: a config or a
// ConfigError, never a panic, and what loads validates.
func FuzzCopiesEnv(f *testing.F) {
	for _, s := range []string{"", "file:///a", "s3://bkt/x, file:///b", ",,", "s3://", "file://rel", "s3://AKIA:x@bkt/p", "file:///var/lib/lifeboat/backups", "s3://bkt/x,s3://bkt/x/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := LoadConfig("", envMap(map[string]string{"LIFEBOAT_COPIES": s}), nil)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("LIFEBOAT_COPIES=%q: %v is not a ConfigError", s, err)
			}
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("LoadConfig returned a config that does not validate: %v", err)
		}
	})
}
