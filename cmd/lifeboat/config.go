package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/url"
	"os"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Config is lifeboat's configuration: the YAML file's shape. Every leaf key
// can also be set by a LIFEBOAT_* environment variable (the key upper-cased,
// dots as underscores: etcd.endpoints → LIFEBOAT_ETCD_ENDPOINTS) and by a
// flag (see flagNames). Flags win over environment, environment over file.
type Config struct {
	// Cluster names the cluster inside the store; several can share one.
	Cluster string `yaml:"cluster"`
	Log     LogConfig
	Etcd    EtcdConfig
	// Snapshot tunes taking a snapshot.
	Snapshot SnapshotConfig
	Store    StoreConfig
	// Encryption configures age encryption of stored objects.
	Encryption EncryptionConfig
	// Retention is the policy prune applies.
	Retention RetentionConfig
	// Drill configures restore drills.
	Drill DrillConfig
	// Schedule holds the agent's cron schedules.
	Schedule ScheduleConfig
	// Agent configures the daemon.
	Agent AgentConfig
	// Notify configures webhook notifications.
	Notify NotifyConfig
}

// DrillConfig configures restore drills.
type DrillConfig struct {
	// ScratchDir is where a drill restores (needs about twice the db size
	// free; emptied after every drill).
	ScratchDir string `yaml:"scratch_dir"`
	// EtcdBinary runs the throwaway etcd from this binary instead of the
	// embedded server, to match the cluster's version.
	EtcdBinary string `yaml:"etcd_binary"`
	// CheckPrefixes must each hold at least one key in the restored data
	// (e.g. /registry/namespaces/ for Kubernetes).
	CheckPrefixes []string `yaml:"check_prefixes"`
	// Timeout bounds one drill.
	Timeout time.Duration `yaml:"timeout"`
}

// ScheduleConfig holds cron schedules (robfig/cron: five fields with
// optional seconds, descriptors like @every 30m or @daily, CRON_TZ=…).
// An empty schedule disables that job.
type ScheduleConfig struct {
	Snapshot string `yaml:"snapshot"`
	Prune    string `yaml:"prune"`
	Drill    string `yaml:"drill"`
	// Jitter delays each run by a random time up to this.
	Jitter time.Duration `yaml:"jitter"`
	// RunAtStart runs a snapshot when the agent starts.
	RunAtStart bool `yaml:"run_at_start"`
	// DrillTarget is latest or random (an older retained backup).
	DrillTarget string `yaml:"drill_target"`
}

// AgentConfig configures the daemon.
type AgentConfig struct {
	// Listen is the HTTP address for /metrics, /healthz, /readyz, /status.
	Listen string `yaml:"listen"`
	// Lock coordinates several agents through a lease-based lock in etcd
	// so each job runs once per cluster.
	Lock bool `yaml:"lock"`
	// LockTTL is the lock lease's TTL: how soon a dead agent's lock expires.
	LockTTL time.Duration `yaml:"lock_ttl"`
	// SnapshotRetries is how often a failed snapshot is retried (with
	// backoff) before the run counts as failed.
	SnapshotRetries int `yaml:"snapshot_retries"`
	// StaleAfter: the newest backup older than this is "stale" (notified).
	StaleAfter time.Duration `yaml:"stale_after"`
	// Pushgateway, when set, receives the metrics after agent --once. It
	// may hold credentials (http://user:password@host:9091): a secret.
	Pushgateway snapshot.Secret `yaml:"pushgateway"`
	// Textfile, when set, receives the metrics after agent --once, for
	// node_exporter's textfile collector.
	Textfile string `yaml:"textfile"`
	// ShutdownTimeout bounds a graceful shutdown.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
}

// NotifyConfig configures webhook notifications.
type NotifyConfig struct {
	// Webhooks receive a JSON POST per event (URLs may hold tokens: they
	// are secrets and never printed).
	Webhooks []snapshot.Secret `yaml:"webhooks"`
	// On lists the events to send: drill_failed, snapshot_failed, stale.
	On []string `yaml:"on"`
	// Timeout bounds one webhook attempt.
	Timeout time.Duration `yaml:"timeout"`
}

// RetentionConfig is the GFS retention policy (restic's forget semantics:
// a backup is kept when any rule keeps it). All zero is an error for
// prune, never "delete everything".
type RetentionConfig struct {
	// KeepLast keeps the N newest backups.
	KeepLast int `yaml:"keep_last"`
	// KeepHourly … KeepYearly keep the newest backup of each of the N most
	// recent hours, days, ISO weeks, months, years that have one (-1: all).
	KeepHourly  int `yaml:"keep_hourly"`
	KeepDaily   int `yaml:"keep_daily"`
	KeepWeekly  int `yaml:"keep_weekly"`
	KeepMonthly int `yaml:"keep_monthly"`
	KeepYearly  int `yaml:"keep_yearly"`
	// KeepWithin keeps every backup younger than this (e.g. 7d).
	KeepWithin Duration `yaml:"keep_within"`
	// TimeZone places the calendar buckets (IANA name; default UTC).
	TimeZone string `yaml:"time_zone"`
	// OrphanGrace is how old a data object without a manifest, or an
	// incomplete multipart upload, must be before prune removes it.
	OrphanGrace Duration `yaml:"orphan_grace"`
}

// Policy returns the retention policy; an all-zero policy is an error.
func (r RetentionConfig) Policy() (retention.Policy, error) {
	loc, err := time.LoadLocation(r.TimeZone)
	if err != nil {
		return retention.Policy{}, cfgErr("retention.time_zone", "%q is not a known time zone (like UTC or Europe/Berlin)", r.TimeZone)
	}
	p := retention.Policy{
		Last: r.KeepLast, Hourly: r.KeepHourly, Daily: r.KeepDaily, Weekly: r.KeepWeekly,
		Monthly: r.KeepMonthly, Yearly: r.KeepYearly, Within: time.Duration(r.KeepWithin), Location: loc,
	}
	if err := p.Validate(); err != nil {
		return retention.Policy{}, &ConfigError{Key: "retention", Err: err}
	}
	return p, nil
}

// LogConfig configures logging.
type LogConfig struct {
	// Level is debug, info, warn or error.
	Level string `yaml:"level"`
	// Format is auto (text on a terminal, JSON otherwise), text or json.
	Format string `yaml:"format"`
}

// EtcdConfig is how to reach etcd (etcdctl's names).
type EtcdConfig struct {
	// Endpoints are client URLs of the members.
	Endpoints []string `yaml:"endpoints"`
	// CACert, Cert and Key are PEM file paths for TLS.
	CACert string `yaml:"cacert"`
	Cert   string `yaml:"cert"`
	Key    string `yaml:"key"`
	// User and Password authenticate with etcd auth.
	User     string          `yaml:"user"`
	Password snapshot.Secret `yaml:"password"`
	// DialTimeout bounds connecting to each member.
	DialTimeout time.Duration `yaml:"dial_timeout"`
	// Member picks the member to snapshot: follower, leader, any, or a URL.
	Member string `yaml:"member"`
}

// SnapshotConfig tunes taking snapshots.
type SnapshotConfig struct {
	// SpoolDir holds the raw snapshot during verification.
	SpoolDir string `yaml:"spool_dir"`
	// StallTimeout fails a stream that delivers no bytes for this long.
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// Timeout bounds the whole backup (0: none).
	Timeout time.Duration `yaml:"timeout"`
	// WritebackChunk is how many bytes are written before they are pushed
	// to disk (0: leave it to the kernel).
	WritebackChunk int64 `yaml:"writeback_chunk"`
	// LiveHashKV compares the snapshot's HashKV with a live member's:
	// always (another member when one can answer), auto (always, except
	// deferred to the drill on a single-member cluster) or defer.
	LiveHashKV string `yaml:"live_hashkv"`
}

// StoreConfig says where backups go.
type StoreConfig struct {
	// URL is file:///path or s3://bucket/prefix.
	URL string `yaml:"url"`
	// Compression is zstd or none.
	Compression string `yaml:"compression"`
	// S3 configures s3:// stores.
	S3 S3StoreConfig `yaml:"s3"`
	// ObjectLock requests S3 Object Lock retention for every data object.
	ObjectLock ObjectLockConfig `yaml:"object_lock"`
}

// S3StoreConfig configures s3:// stores. Credentials come from the AWS
// SDK's standard chain (environment, shared config and profiles, web
// identity / IRSA, instance roles), never from this file.
type S3StoreConfig struct {
	// Endpoint is an S3-compatible service's URL (MinIO, Ceph, versitygw…);
	// empty uses AWS_ENDPOINT_URL_S3 or AWS.
	Endpoint string `yaml:"endpoint"`
	// Region signs requests; empty uses the SDK chain, then us-east-1.
	Region string `yaml:"region"`
	// PathStyle addresses buckets as host/bucket (most non-AWS servers).
	PathStyle bool `yaml:"path_style"`
	// SSE is "", AES256 or aws:kms; SSEKMSKeyID names the KMS key.
	SSE         string `yaml:"sse"`
	SSEKMSKeyID string `yaml:"sse_kms_key_id"`
	// StorageClass of new objects (e.g. STANDARD_IA).
	StorageClass string `yaml:"storage_class"`
	// PartSize is the multipart part size in bytes (5MiB…5GiB).
	PartSize int64 `yaml:"part_size"`
	// Concurrency is how many parts upload at once.
	Concurrency int `yaml:"concurrency"`
	// CreateBucket creates a missing bucket instead of failing.
	CreateBucket bool `yaml:"create_bucket"`
	// Profile selects a shared config profile.
	Profile string `yaml:"profile"`
	// MaxAttempts is how often one request is tried.
	MaxAttempts int `yaml:"max_attempts"`
}

// ObjectLockConfig requests per-object retention at upload.
type ObjectLockConfig struct {
	// Mode is GOVERNANCE or COMPLIANCE; empty: no per-object retention
	// (a bucket's default retention still applies).
	Mode string `yaml:"mode"`
	// Retain is how long each object is locked (e.g. 30d).
	Retain Duration `yaml:"retain"`
	// LegalHold puts a legal hold on each object.
	LegalHold bool `yaml:"legal_hold"`
}

// EncryptionConfig configures age encryption.
type EncryptionConfig struct {
	// Recipients are age X25519 public keys (age1…).
	Recipients []string `yaml:"recipients"`
	// RecipientsFile holds more recipients, one per line.
	RecipientsFile string `yaml:"recipients_file"`
	// IdentityFile holds the age secret key used to read backups.
	IdentityFile string `yaml:"identity_file"`
}

// DefaultConfig returns the defaults: the one place they live.
func DefaultConfig() Config {
	return Config{
		Cluster: "default",
		Log:     LogConfig{Level: "info", Format: "auto"},
		Etcd: EtcdConfig{
			Endpoints:   []string{"http://127.0.0.1:2379"},
			DialTimeout: 5 * time.Second,
			Member:      "follower",
		},
		Snapshot: SnapshotConfig{
			SpoolDir:       "/var/lib/lifeboat/spool",
			StallTimeout:   30 * time.Second,
			Timeout:        30 * time.Minute,
			WritebackChunk: 8 << 20,
			LiveHashKV:     snapshot.LiveHashKVAlways,
		},
		Store:     StoreConfig{URL: "file:///var/lib/lifeboat/backups", Compression: "zstd"},
		Retention: RetentionConfig{TimeZone: "UTC", OrphanGrace: Duration(24 * time.Hour)},
		Drill: DrillConfig{
			ScratchDir:    "/var/lib/lifeboat/scratch",
			CheckPrefixes: []string{},
			Timeout:       15 * time.Minute,
		},
		Schedule: ScheduleConfig{Snapshot: "@every 1h", Drill: "@daily", DrillTarget: "latest"},
		Agent: AgentConfig{
			Listen:          "127.0.0.1:9469",
			Lock:            true,
			LockTTL:         30 * time.Second,
			SnapshotRetries: 2,
			StaleAfter:      3 * time.Hour,
			ShutdownTimeout: 30 * time.Second,
		},
		Notify: NotifyConfig{On: []string{"drill_failed", "snapshot_failed", "stale"}, Timeout: 10 * time.Second},
	}
}

// ConfigError is a configuration mistake; it makes lifeboat exit 2.
type ConfigError struct {
	Key string
	Err error
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return "config: " + e.Err.Error()
	}
	return "config: " + e.Key + ": " + e.Err.Error()
}
func (e *ConfigError) Unwrap() error { return e.Err }

func cfgErr(key string, format string, a ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, a...)}
}

// Validate checks values; the error names the key that is wrong.
func (c *Config) Validate() error {
	if c.Cluster == "" || strings.ContainsAny(c.Cluster, "/\\ ") || strings.HasPrefix(c.Cluster, ".") {
		return cfgErr("cluster", "%q is not a valid cluster name (letters, digits, - _ ., no slashes)", c.Cluster)
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		return cfgErr("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "auto", "text", "json":
	default:
		return cfgErr("log.format", "%q is not one of auto, text, json", c.Log.Format)
	}
	if len(c.Etcd.Endpoints) == 0 {
		return cfgErr("etcd.endpoints", "empty: give at least one client URL")
	}
	for i, e := range c.Etcd.Endpoints {
		if hasUserInfo(e) {
			return cfgErr("etcd.endpoints", "entry %d holds credentials (user:password@): give them as etcd.user and etcd.password (--user, ETCDCTL_PASSWORD)", i+1)
		}
		if !strings.HasPrefix(e, "http://") && !strings.HasPrefix(e, "https://") {
			return cfgErr("etcd.endpoints", "%q must be a URL starting with http:// or https://", e)
		}
	}
	if (c.Etcd.Cert == "") != (c.Etcd.Key == "") {
		return cfgErr("etcd.cert", "cert and key must be given together")
	}
	if c.Etcd.Password != "" && c.Etcd.User == "" {
		return cfgErr("etcd.user", "password set without user")
	}
	if c.Etcd.DialTimeout <= 0 {
		return cfgErr("etcd.dial_timeout", "must be positive")
	}
	switch m := c.Etcd.Member; {
	case m == "follower" || m == "leader" || m == "any":
	case hasUserInfo(m):
		return cfgErr("etcd.member", "holds credentials (user:password@): give them as etcd.user and etcd.password (--user, ETCDCTL_PASSWORD)")
	case strings.HasPrefix(m, "http://") || strings.HasPrefix(m, "https://"):
	default:
		return cfgErr("etcd.member", "%q is not follower, leader, any or an endpoint URL", m)
	}
	if c.Snapshot.SpoolDir == "" {
		return cfgErr("snapshot.spool_dir", "empty")
	}
	if c.Snapshot.StallTimeout <= 0 {
		return cfgErr("snapshot.stall_timeout", "must be positive")
	}
	if c.Snapshot.Timeout < 0 {
		return cfgErr("snapshot.timeout", "must not be negative")
	}
	if c.Snapshot.WritebackChunk < 0 {
		return cfgErr("snapshot.writeback_chunk", "must not be negative")
	}
	if err := snapshot.ValidateLiveHashKV(c.Snapshot.LiveHashKV); err != nil {
		return cfgErr("snapshot.live_hashkv", "%v", err)
	}
	if _, _, err := parseStoreURL(c.Store.URL); err != nil {
		return &ConfigError{Key: "store.url", Err: err}
	}
	switch c.Store.Compression {
	case "zstd", "none":
	default:
		return cfgErr("store.compression", "%q is not zstd or none", c.Store.Compression)
	}
	if _, err := time.LoadLocation(c.Retention.TimeZone); err != nil {
		return cfgErr("retention.time_zone", "%q is not a known time zone (like UTC or Europe/Berlin)", c.Retention.TimeZone)
	}
	for key, n := range map[string]int{"retention.keep_last": c.Retention.KeepLast, "retention.keep_hourly": c.Retention.KeepHourly,
		"retention.keep_daily": c.Retention.KeepDaily, "retention.keep_weekly": c.Retention.KeepWeekly,
		"retention.keep_monthly": c.Retention.KeepMonthly, "retention.keep_yearly": c.Retention.KeepYearly} {
		if n < -1 {
			return cfgErr(key, "%d: use a count, 0 for off or -1 for unlimited", n)
		}
	}
	if c.Retention.KeepWithin < 0 {
		return cfgErr("retention.keep_within", "must not be negative")
	}
	if c.Retention.OrphanGrace < 0 {
		return cfgErr("retention.orphan_grace", "must not be negative")
	}
	if c.Drill.ScratchDir == "" {
		return cfgErr("drill.scratch_dir", "empty")
	}
	if c.Drill.Timeout <= 0 {
		return cfgErr("drill.timeout", "must be positive")
	}
	for _, p := range c.Drill.CheckPrefixes {
		if p == "" {
			return cfgErr("drill.check_prefixes", "empty prefix")
		}
	}
	for key, spec := range map[string]string{"schedule.snapshot": c.Schedule.Snapshot, "schedule.prune": c.Schedule.Prune, "schedule.drill": c.Schedule.Drill} {
		if spec == "" {
			continue
		}
		if _, err := cronParser.Parse(spec); err != nil {
			return cfgErr(key, "%q is not a cron schedule (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…): %v", spec, err)
		}
	}
	if c.Schedule.Jitter < 0 {
		return cfgErr("schedule.jitter", "must not be negative")
	}
	if c.Schedule.DrillTarget != "latest" && c.Schedule.DrillTarget != "random" {
		return cfgErr("schedule.drill_target", "%q is not latest or random", c.Schedule.DrillTarget)
	}
	if _, _, err := net.SplitHostPort(c.Agent.Listen); err != nil && c.Agent.Listen != "" {
		return cfgErr("agent.listen", "%q is not host:port", c.Agent.Listen)
	}
	if c.Agent.LockTTL < 5*time.Second {
		return cfgErr("agent.lock_ttl", "must be at least 5s")
	}
	if c.Agent.SnapshotRetries < 0 {
		return cfgErr("agent.snapshot_retries", "must not be negative")
	}
	if floor := prune.MinOrphanGrace(c.Snapshot.Timeout, c.Agent.SnapshotRetries, 0); time.Duration(c.Retention.OrphanGrace) < floor {
		backoff := floor - time.Duration(c.Agent.SnapshotRetries+1)*c.Snapshot.Timeout
		how := fmt.Sprintf("(agent.snapshot_retries %d + 1) × snapshot.timeout %s + %s of backoff between attempts", c.Agent.SnapshotRetries, c.Snapshot.Timeout, backoff)
		if c.Snapshot.Timeout <= 0 {
			how = fmt.Sprintf("snapshot.timeout 0 leaves snapshots unbounded (agent.snapshot_retries %d)", c.Agent.SnapshotRetries)
		}
		return cfgErr("retention.orphan_grace", "%s is below its floor %s, the longest a snapshot can run: %s; prune would remove the objects of a backup still being stored. Set at least %s, or lower snapshot.timeout",
			time.Duration(c.Retention.OrphanGrace), floor, how, floor)
	}
	if c.Agent.StaleAfter <= 0 {
		return cfgErr("agent.stale_after", "must be positive")
	}
	if c.Agent.ShutdownTimeout <= 0 {
		return cfgErr("agent.shutdown_timeout", "must be positive")
	}
	if p := c.Agent.Pushgateway.Reveal(); p != "" && !strings.HasPrefix(p, "http://") && !strings.HasPrefix(p, "https://") {
		return cfgErr("agent.pushgateway", "must be an http(s) URL")
	}
	for i, w := range c.Notify.Webhooks {
		if u, err := url.Parse(w.Reveal()); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfgErr("notify.webhooks", "entry %d is not an http(s) URL", i+1)
		}
	}
	for _, e := range c.Notify.On {
		switch e {
		case "drill_failed", "snapshot_failed", "stale", "prune_failed":
		default:
			return cfgErr("notify.on", "%q is not drill_failed, snapshot_failed, prune_failed or stale", e)
		}
	}
	if c.Notify.Timeout <= 0 {
		return cfgErr("notify.timeout", "must be positive")
	}
	if m := c.Store.ObjectLock.Mode; m != "" {
		if m != "GOVERNANCE" && m != "COMPLIANCE" {
			return cfgErr("store.object_lock.mode", "%q is not GOVERNANCE or COMPLIANCE", m)
		}
		if c.Store.ObjectLock.Retain <= 0 {
			return cfgErr("store.object_lock.retain", "must be set (e.g. 30d) when store.object_lock.mode is set")
		}
	} else if c.Store.ObjectLock.Retain != 0 {
		return cfgErr("store.object_lock.mode", "must be set (GOVERNANCE or COMPLIANCE) when store.object_lock.retain is set")
	}
	if scheme, _, _ := parseStoreURL(c.Store.URL); scheme == "file" && (c.Store.ObjectLock.Mode != "" || c.Store.ObjectLock.LegalHold) {
		return cfgErr("store.object_lock.mode", "Object Lock needs an s3:// store")
	}
	if scheme, loc, _ := parseStoreURL(c.Store.URL); scheme == "s3" {
		if err := c.s3Config(loc).Validate(); err != nil {
			return &ConfigError{Key: "store", Err: err}
		}
	}
	return nil
}

// s3Config builds the S3 store's configuration for location bucket/prefix.
func (c *Config) s3Config(loc string) uploader.S3Config {
	bucket, prefix, _ := strings.Cut(loc, "/")
	s := c.Store.S3
	return uploader.S3Config{
		Bucket: bucket, Prefix: strings.Trim(prefix, "/"), // s3://bucket/prefix/ as s3://bucket/prefix
		Endpoint: s.Endpoint, Region: s.Region, PathStyle: s.PathStyle,
		SSE: s.SSE, SSEKMSKeyID: s.SSEKMSKeyID, StorageClass: s.StorageClass,
		PartSize: s.PartSize, Concurrency: s.Concurrency, CreateBucket: s.CreateBucket,
		Profile: s.Profile, MaxAttempts: s.MaxAttempts,
	}
}

// cronParser parses schedules as the agent does.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Duration is a time.Duration that also accepts days, weeks and years
// ("30d", "2w", "1y") in the file, environment and flags.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := retention.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (like 36h, 30d, 2w)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// hasUserInfo reports whether a URL (or host:port) names credentials
// before its host (user:password@host).
func hasUserInfo(u string) bool {
	if _, rest, ok := strings.Cut(u, "://"); ok {
		u = rest
	}
	host, _, _ := strings.Cut(u, "/")
	return strings.Contains(host, "@")
}

// parseStoreURL splits a store URL into scheme and location. Its errors
// never show a URL that holds credentials.
func parseStoreURL(u string) (scheme, rest string, err error) {
	if hasUserInfo(u) {
		return "", "", errors.New("credentials in the store URL are not allowed (S3 takes them from the AWS credential chain: AWS_ACCESS_KEY_ID, profiles, IRSA)")
	}
	switch {
	case strings.HasPrefix(u, "file://"):
		p := strings.TrimPrefix(u, "file://")
		if !strings.HasPrefix(p, "/") {
			return "", "", fmt.Errorf("%q: a file URL needs an absolute path (file:///var/lib/lifeboat/backups)", u)
		}
		return "file", p, nil
	case strings.HasPrefix(u, "s3://"):
		if strings.TrimPrefix(u, "s3://") == "" {
			return "", "", fmt.Errorf("%q: an s3 URL needs a bucket (s3://bucket/prefix)", u)
		}
		return "s3", strings.TrimPrefix(u, "s3://"), nil
	default:
		return "", "", fmt.Errorf("%q is not a file:///path or s3://bucket/prefix URL", u)
	}
}

// option is one leaf key of Config, reached by reflection.
type option struct {
	key   string // yaml path, e.g. etcd.endpoints
	field reflect.Value
}

// options lists every leaf key of c, in file order.
func options(c *Config) []option {
	var out []option
	var walk func(prefix string, v reflect.Value)
	walk = func(prefix string, v reflect.Value) {
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := yamlName(f)
			key := name
			if prefix != "" {
				key = prefix + "." + name
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Struct && fv.Type() != reflect.TypeOf(time.Time{}) {
				walk(key, fv)
				continue
			}
			out = append(out, option{key: key, field: fv})
		}
	}
	walk("", reflect.ValueOf(c).Elem())
	return out
}

func yamlName(f reflect.StructField) string {
	if tag, ok := f.Tag.Lookup("yaml"); ok {
		if n := strings.Split(tag, ",")[0]; n != "" {
			return n
		}
	}
	return strings.ToLower(f.Name)
}

// envName is the LIFEBOAT_* variable for a key.
func envName(key string) string {
	return "LIFEBOAT_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

// etcdctlEnv maps keys to etcdctl's environment variables, read when the
// LIFEBOAT_* variable is unset so existing scripts carry over.
var etcdctlEnv = map[string]string{
	"etcd.endpoints":    "ETCDCTL_ENDPOINTS",
	"etcd.cacert":       "ETCDCTL_CACERT",
	"etcd.cert":         "ETCDCTL_CERT",
	"etcd.key":          "ETCDCTL_KEY",
	"etcd.user":         "ETCDCTL_USER",
	"etcd.password":     "ETCDCTL_PASSWORD",
	"etcd.dial_timeout": "ETCDCTL_DIAL_TIMEOUT",
}

// set parses s into the option's field.
func (o option) set(s string) error {
	f := o.field
	switch f.Interface().(type) {
	case Duration:
		d, err := retention.ParseDuration(s)
		if err != nil {
			return cfgErr(o.key, "%q is not a duration (like 36h, 30d, 2w)", s)
		}
		f.SetInt(int64(d))
		return nil
	case time.Duration:
		d, err := retention.ParseDuration(s)
		if err != nil {
			return cfgErr(o.key, "%q is not a duration (like 30s, 5m, 1h, 1d)", s)
		}
		f.SetInt(int64(d))
		return nil
	case []snapshot.Secret:
		// URLs (webhooks): split only before the next http(s)://, so
		// that a URL holding a comma can be set in one variable.
		var parts []snapshot.Secret
		for _, p := range splitURLs(s) {
			parts = append(parts, snapshot.Secret(p))
		}
		f.Set(reflect.ValueOf(parts))
		return nil
	case []string:
		var parts []string
		for _, p := range strings.Split(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				parts = append(parts, p)
			}
		}
		f.Set(reflect.ValueOf(parts))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return cfgErr(o.key, "%q is not true or false", s)
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := parseSize(s)
		if err != nil {
			return cfgErr(o.key, "%q is not a number", s)
		}
		f.SetInt(n)
	default:
		return cfgErr(o.key, "cannot be set from text")
	}
	return nil
}

// splitURLs splits a comma-separated list of URLs at the commas that
// are followed by (spaces and) http:// or https://: a comma inside a URL
// stays. Empty entries are dropped.
func splitURLs(s string) []string {
	var out []string
	add := func(p string) {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] != ',' {
			continue
		}
		rest := strings.ToLower(strings.TrimLeft(s[i+1:], " \t"))
		if strings.HasPrefix(rest, "http://") || strings.HasPrefix(rest, "https://") {
			add(s[start:i])
			start = i + 1
		}
	}
	add(s[start:])
	return out
}

// parseSize parses an integer with an optional KiB/MiB/GiB/TiB suffix
// (8MiB, 8 MiB); an overflow is an error.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range []struct {
		suf string
		m   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if strings.HasSuffix(s, u.suf) {
			s, mult = strings.TrimSuffix(s, u.suf), u.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, err
	}
	if n > math.MaxInt64/mult || n < math.MinInt64/mult {
		return 0, fmt.Errorf("%s: out of range", s)
	}
	return n * mult, nil
}

// withScheme gives an endpoint written without a scheme, as etcdctl
// accepts it (127.0.0.1:2379), https:// when TLS is configured, else
// http://. Anything else is returned unchanged (and validated later).
func withScheme(e string, tls bool) string {
	if e == "" || strings.Contains(e, "://") {
		return e
	}
	if tls {
		return "https://" + e
	}
	return "http://" + e
}

// normalize applies etcdctl's conventions after every source is read:
// endpoints (and an endpoint as etcd.member) without a scheme.
func (c *Config) normalize() {
	tls := c.Etcd.CACert != "" || c.Etcd.Cert != ""
	for i, e := range c.Etcd.Endpoints {
		c.Etcd.Endpoints[i] = withScheme(strings.TrimSpace(e), tls)
	}
	switch m := c.Etcd.Member; m {
	case "follower", "leader", "any", "":
	default:
		if strings.Contains(m, ":") {
			c.Etcd.Member = withScheme(m, tls)
		}
	}
}

// decodeConfigFile strictly decodes YAML into c: unknown keys and wrong
// types are errors naming the key and line. Durations and sizes are read
// by the same parsers as environment and flags (1d, 8MiB), not YAML's.
func decodeConfigFile(data []byte, c *Config) error {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	err := dec.Decode(&doc)
	if errors.Is(err, io.EOF) {
		return nil // empty file
	}
	if err != nil {
		return yamlError(data, err)
	}
	leaves := map[string]option{}
	for _, o := range options(c) {
		leaves[o.key] = o
	}
	if err := prepareNode(&doc, "", leaves, 0); err != nil {
		return err
	}
	if err := doc.Decode(c); err != nil {
		return yamlError(data, err)
	}
	return nil
}

// prepareNode walks the YAML tree against the config's keys: an unknown
// key is an error (the decoder's KnownFields, which Node.Decode lacks),
// and a duration or size leaf is parsed with the option's own parser and
// rewritten into the form YAML's decoder takes.
func prepareNode(n *yaml.Node, prefix string, leaves map[string]option, depth int) error {
	if depth > 16 {
		return &ConfigError{Key: prefix, Err: fmt.Errorf("line %d: nested too deeply", n.Line)}
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			if err := prepareNode(c, prefix, leaves, depth+1); err != nil {
				return err
			}
		}
		return nil
	case yaml.AliasNode:
		if n.Alias != nil {
			return prepareNode(n.Alias, prefix, leaves, depth+1)
		}
		return nil
	case yaml.MappingNode:
	default:
		return nil // a type error: the decoder reports it
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value == "<<" && k.Tag == "!!merge" {
			if err := prepareNode(v, prefix, leaves, depth+1); err != nil {
				return err
			}
			continue
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + key
		}
		if o, ok := leaves[key]; ok {
			if err := prepareLeaf(v, o); err != nil {
				return err
			}
			continue
		}
		known := false
		for l := range leaves {
			if strings.HasPrefix(l, key+".") {
				known = true
				break
			}
		}
		if !known {
			return &ConfigError{Key: key, Err: fmt.Errorf("line %d: unknown key", k.Line)}
		}
		if err := prepareNode(v, key, leaves, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// prepareLeaf parses a duration or size scalar as the environment and
// flags do and rewrites it canonically (a Go duration, a decimal integer).
func prepareLeaf(v *yaml.Node, o option) error {
	for v.Kind == yaml.AliasNode && v.Alias != nil && v.Alias != v {
		v = v.Alias
	}
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
		return nil
	}
	switch o.field.Interface().(type) {
	case Duration, time.Duration:
		d, err := retention.ParseDuration(v.Value)
		if err != nil {
			return &ConfigError{Key: o.key, Err: fmt.Errorf("line %d: %q is not a duration (like 30s, 36h, 1d, 2w)", v.Line, v.Value)}
		}
		v.Value, v.Tag, v.Style = time.Duration(d).String(), "!!str", 0
		return nil
	}
	if k := o.field.Kind(); (k == reflect.Int64 || k == reflect.Int) && v.Tag == "!!str" {
		n, err := parseSize(v.Value)
		if err != nil {
			return &ConfigError{Key: o.key, Err: fmt.Errorf("line %d: %q is not a number (sizes like 8MiB)", v.Line, v.Value)}
		}
		v.Value, v.Tag, v.Style = strconv.FormatInt(n, 10), "!!int", 0
	}
	return nil
}

var yamlLineRE = regexp.MustCompile(`line (\d+): (.*)`)

// yamlError turns a YAML decoding error into one ConfigError that names
// the key (yaml.v3 reports only line numbers for type errors).
func yamlError(data []byte, err error) error {
	var te *yaml.TypeError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return &ConfigError{Err: fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))}
	}
	keys := map[int]string{} // line → key path whose value starts there
	var root yaml.Node
	if yaml.Unmarshal(data, &root) == nil {
		var walk func(prefix string, n *yaml.Node)
		walk = func(prefix string, n *yaml.Node) {
			switch n.Kind {
			case yaml.DocumentNode:
				for _, c := range n.Content {
					walk(prefix, c)
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					key := n.Content[i].Value
					if prefix != "" {
						key = prefix + "." + key
					}
					keys[n.Content[i].Line] = key
					if _, seen := keys[n.Content[i+1].Line]; !seen {
						keys[n.Content[i+1].Line] = key
					}
					walk(key, n.Content[i+1])
				}
			}
		}
		walk("", &root)
	}
	msg := te.Errors[0]
	m := yamlLineRE.FindStringSubmatch(msg)
	if m == nil {
		return &ConfigError{Err: errors.New(msg)}
	}
	line, _ := strconv.Atoi(m[1])
	detail := strings.Replace(m[2], "cannot unmarshal", "cannot use", 1)
	key := keys[line]
	if strings.Contains(detail, "not found in type") {
		// "field foo not found in type main.EtcdConfig"
		if f := strings.Fields(detail); len(f) > 1 {
			if key == "" {
				key = f[1]
			}
			detail = "unknown key"
		}
	}
	return &ConfigError{Key: key, Err: fmt.Errorf("line %d: %s", line, detail)}
}

// LoadConfig builds the effective configuration: defaults, then the file
// (when path is not empty), then environment (getenv), then flags.
func LoadConfig(path string, getenv func(string) string, flags map[string]string) (*Config, error) {
	c := DefaultConfig()
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, &ConfigError{Err: fmt.Errorf("read config file: %w", err)}
		}
		if err := decodeConfigFile(data, &c); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	opts := options(&c)
	for _, o := range opts {
		v := getenv(envName(o.key))
		if v == "" {
			if alias, ok := etcdctlEnv[o.key]; ok {
				v = getenv(alias)
			}
		}
		if v == "" {
			continue
		}
		if err := o.set(v); err != nil {
			return nil, fmt.Errorf("environment %s: %w", envName(o.key), err)
		}
	}
	byKey := map[string]option{}
	for _, o := range opts {
		byKey[o.key] = o
	}
	keys := make([]string, 0, len(flags))
	for k := range flags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o, ok := byKey[k]
		if !ok {
			return nil, cfgErr(k, "unknown key")
		}
		if err := o.set(flags[k]); err != nil {
			return nil, err
		}
	}
	c.normalize()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &c, nil
}

// Redacted renders the configuration as YAML with secrets replaced.
func (c *Config) Redacted() (string, error) {
	b, err := yaml.Marshal(c)
	if err != nil {
		return "", err
	}
	return string(b), nil
}
