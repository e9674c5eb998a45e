package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/replica"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// CopyConfig is one copy: a further store that holds every backup the
// primary committed and the copy's retention keeps (package replica).
type CopyConfig struct {
	// Name labels the copy in metrics, logs, list and drill.store; never
	// its URL.
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	// S3 are the copy's S3 settings; absent, the primary's (store.s3).
	S3 *S3StoreConfig `yaml:"s3,omitempty"`
	// ObjectLock is the copy's own; absent, none.
	ObjectLock ObjectLockConfig `yaml:"object_lock,omitempty"`
	// Retention is the copy's policy; absent, the primary's.
	Retention *RetentionConfig `yaml:"retention,omitempty"`
}

// Names a copy cannot take: drill.store's other values.
const (
	storePrimary   = "primary"
	storeAlternate = "alternate"
)

var copyNameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// parseCopies reads copies in the flags' and environment's syntax: store
// URLs, comma-separated or one per --copy, named copy1, copy2, … with the
// primary's S3 settings and policy.
func parseCopies(s string) []CopyConfig {
	var out []CopyConfig
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		// Validate checks the URL, naming the key without echoing a
		// URL that holds credentials (a flag's parse error would).
		out = append(out, CopyConfig{Name: "copy" + strconv.Itoa(len(out)+1), URL: u})
	}
	return out
}

// checkCopyKeys walks the YAML list of copies against CopyConfig's keys:
// an unknown key is an error naming it (and the nearest known one), a
// value of the wrong type one in words, and sizes (s3.part_size: 8MiB)
// and durations are read by the one parser. It records each key's line.
func checkCopyKeys(v *yaml.Node, lines map[string]int) error {
	for i := 0; v.Kind == yaml.AliasNode && v.Alias != nil && i < 16; i++ {
		v = v.Alias
	}
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return nil
	case v.Kind != yaml.SequenceNode:
		return &ConfigError{Key: "copies", Line: v.Line, Err: fmt.Errorf("want a list of stores, e.g. [{name: dr, url: s3://bucket/prefix}], not %s", describeNode(v))}
	}
	for i, e := range v.Content {
		key := fmt.Sprintf("copies[%d]", i)
		lines[key] = e.Line
		if err := checkKeys(e, reflect.TypeOf(CopyConfig{}), key, lines, 0); err != nil {
			return err
		}
	}
	return nil
}

func checkKeys(n *yaml.Node, t reflect.Type, prefix string, lines map[string]int, depth int) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 16; i++ {
		n = n.Alias
	}
	if t.Kind() != reflect.Struct {
		return prepareLeaf(prefix, t, isSecret(t), n)
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.MappingNode || depth > 4 {
		return &ConfigError{Key: prefix, Line: n.Line, Err: fmt.Errorf("want a section of keys indented below it, not %s", describeNode(n))}
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		key := prefix + "." + k.Value
		var ft reflect.Type
		var known []string
		for j := 0; j < t.NumField(); j++ {
			known = append(known, prefix+"."+yamlName(t.Field(j)))
			if yamlName(t.Field(j)) == k.Value {
				ft = t.Field(j).Type
			}
		}
		if ft == nil {
			return &ConfigError{Key: key, Line: k.Line, Err: unknownKeyErr(key, known)}
		}
		if _, seen := lines[key]; !seen {
			lines[key] = k.Line
		}
		if err := checkKeys(n.Content[i+1], ft, key, lines, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// validateCopies checks each copy: a unique name, a store URL that is
// neither the primary nor another copy, its S3 settings, Object Lock and
// retention by the primary's rules.
func (c *Config) validateCopies(primary uploader.StoreURL) error {
	seen := map[string]string{storeID(primary, c.Store.S3.Endpoint): "the primary store (store.url)"}
	names := map[string]bool{}
	for i, cc := range c.Copies {
		key := fmt.Sprintf("copies[%d]", i)
		switch {
		case cc.Name == storePrimary || cc.Name == storeAlternate:
			return cfgErr(key+".name", "%q is reserved (drill.store's primary and alternate)", cc.Name)
		case !copyNameRE.MatchString(cc.Name):
			return cfgErr(key+".name", "%q: give a name of lower-case letters, digits and hyphens (up to 32), like dr or eu-west", cc.Name)
		case names[cc.Name]:
			return cfgErr(key+".name", "%q is the name of an earlier copy: names must be unique", cc.Name)
		}
		names[cc.Name] = true
		u, err := uploader.ParseStoreURL(cc.URL)
		if err != nil {
			return &ConfigError{Key: key + ".url", Err: err}
		}
		id := storeID(u, c.copyS3(cc).Endpoint)
		if prev, ok := seen[id]; ok {
			return cfgErr(key+".url", "copy %s is the same store as %s: a copy must be another store", cc.Name, prev)
		}
		seen[id] = "copy " + cc.Name
		if err := validateLock(key+".object_lock", cc.ObjectLock, u); err != nil {
			return err
		}
		if u.Scheme == "s3" {
			if err := s3Config(u, c.copyS3(cc)).Validate(); err != nil {
				return &ConfigError{Key: key, Err: err}
			}
		}
		if cc.Retention != nil {
			if _, err := cc.Retention.Policy(); err != nil {
				return &ConfigError{Key: key + ".retention", Err: err}
			}
		}
	}
	return nil
}

// storeID says which store a URL is: a directory, or a bucket and prefix
// at an endpoint.
func storeID(u uploader.StoreURL, endpoint string) string {
	if u.Scheme == "file" {
		return "file:" + filepath.Clean(u.Dir)
	}
	return "s3:" + strings.TrimSuffix(endpoint, "/") + "/" + u.Bucket + "/" + u.Prefix
}

// storeIsCopy: --store (or LIFEBOAT_STORE_URL) names one of the file's
// copies, as at 3 a.m. when the primary is gone and every command reads
// the copy. That copy becomes the store with its own S3 settings, Object
// Lock and retention, and leaves the list of copies (it would be a copy
// of itself). Written so in the file itself, a copy equal to the primary
// stays an error.
func (c *Config) storeIsCopy() {
	u, err := uploader.ParseStoreURL(c.Store.URL)
	if err != nil {
		return // Validate says why
	}
	for i, cc := range c.Copies {
		cu, err := uploader.ParseStoreURL(cc.URL)
		if err != nil || storeID(cu, c.copyS3(cc).Endpoint) != storeID(u, c.copyS3(cc).Endpoint) {
			continue
		}
		others := slices.Delete(slices.Clone(c.Copies), i, i+1)
		*c = *c.copyConfig(cc)
		c.Copies = others
		return
	}
}

// copyS3 is a copy's S3 settings: its own, or the primary's.
func (c *Config) copyS3(cc CopyConfig) S3StoreConfig {
	if cc.S3 != nil {
		return *cc.S3
	}
	return c.Store.S3
}

// copyPolicy is a copy's retention policy: its own, or the primary's;
// nil when neither keeps anything (no retention configured: every
// backup is copied, and prune refuses to run).
func (c *Config) copyPolicy(cc CopyConfig) *retention.Policy {
	r := c.Retention
	if cc.Retention != nil {
		r = *cc.Retention
	}
	p, err := r.Policy()
	if err != nil {
		return nil
	}
	return &p
}

// copyRetention is the retention configuration prune applies to a copy.
func (c *Config) copyRetention(cc CopyConfig) RetentionConfig {
	if cc.Retention == nil {
		return c.Retention
	}
	r := *cc.Retention
	r.OrphanGrace = c.Retention.OrphanGrace
	if r.TimeZone == "" {
		r.TimeZone = c.Retention.TimeZone
	}
	return r
}

// copyConfig is the configuration with copy cc as its store: what a
// command run with --store of the copy would have.
func (c *Config) copyConfig(cc CopyConfig) *Config {
	d := *c
	d.Store.URL, d.Store.S3, d.Store.ObjectLock = cc.URL, c.copyS3(cc), cc.ObjectLock
	d.Retention = c.copyRetention(cc)
	d.Copies = nil
	return &d
}

// copyStore is one configured copy, opened.
type copyStore struct {
	cfg  CopyConfig
	repo *repository.Repo
}

// openCopies opens every configured copy's store.
func openCopies(ctx context.Context, cfg *Config, lg *slog.Logger) ([]copyStore, error) {
	var out []copyStore
	for _, cc := range cfg.Copies {
		st, err := openStore(ctx, cfg.copyConfig(cc), lg, true)
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", cc.Name, err)
		}
		r, err := trustedRepo(st, cfg, lg)
		if err != nil {
			return nil, err
		}
		r.Lock = lockPolicy(cfg.copyConfig(cc)) // the copy's own object_lock
		out = append(out, copyStore{cfg: cc, repo: r})
	}
	return out, nil
}

// copyJob is the replica job that brings copy cs up to date with primary.
//
// With an identity file configured, the primary's change segments are
// checked before they are copied (replica.Job.Identities); one that does
// not load leaves them unchecked, as without one (the commands that need
// it say so).
func (c *Config) copyJob(primary *repository.Repo, cs copyStore) replica.Job {
	ids, _ := identities(c)
	return replica.Job{
		Name: cs.cfg.Name, From: primary, To: cs.repo, Policy: c.copyPolicy(cs.cfg), Grace: c.Capture.CompactionGrace,
		Identities: ids,
	}
}
