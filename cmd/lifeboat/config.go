package main

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Config is lifeboat's configuration: the YAML file's shape, mapped onto the
// packages' own configurations below. Each leaf field is documented by its
// row in optionTable (options.go: help, default, flag, environment, the
// commands that take it; docs/configuration.md is generated from it), which
// a test keeps in step with these structs. Flags win over environment,
// environment over file, file over defaults.
type Config struct {
	Cluster    string `yaml:"cluster"`
	Log        LogConfig
	Etcd       EtcdConfig
	Snapshot   SnapshotConfig
	Store      StoreConfig
	Copies     []CopyConfig `yaml:"copies"`
	Encryption EncryptionConfig
	Signing    SigningConfig
	Lineage    LineageConfig
	Retention  RetentionConfig
	Drill      DrillConfig
	Schedule   ScheduleConfig
	Agent      AgentConfig
	Capture    CaptureConfig
	Notify     NotifyConfig
	Inspect    InspectConfig
	Kit        KitConfig
	Fleet      FleetConfig
	Scrub      ScrubConfig
	Kubernetes KubernetesConfig
}

// KubernetesConfig configures the objects the agent keeps in the
// Kubernetes API (package kubeobjects): EtcdBackup objects and the
// cluster's EtcdRecoverability object, and Events on failures.
type KubernetesConfig struct {
	Objects KubernetesObjectsConfig `yaml:"objects"`
	// Kubeconfig is a kubeconfig file; empty: the pod's service account.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace holds the EtcdBackup objects; empty: the pod's own
	// namespace (POD_NAMESPACE, or the service account's namespace file).
	Namespace string `yaml:"namespace"`
}

// KubernetesObjectsConfig switches the objects on.
type KubernetesObjectsConfig struct {
	Enabled bool `yaml:"enabled"`
}

// ScrubConfig configures the scrub (lifeboat scrub, and the agent's on
// its schedule): see package scrub.
type ScrubConfig struct {
	// Schedule is the agent's cron schedule of the scrub ("": off).
	Schedule string `yaml:"schedule"`
	// ReadData is the least share of the stored bytes read in full each run.
	ReadData Percent `yaml:"read_data"`
	// Cycle is the longest an object goes without being read in full.
	Cycle Duration `yaml:"cycle"`
}

// validate checks the scrub's keys.
func (s ScrubConfig) validate() error {
	if s.Schedule != "" {
		if _, err := agent.ParseSchedule(s.Schedule); err != nil {
			return cfgErr("scrub.schedule", "%q is not a cron schedule (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…): %v", s.Schedule, err)
		}
	}
	if s.Cycle < Duration(time.Hour) {
		return cfgErr("scrub.cycle", "%s: must be at least 1h (every object is read in full once per cycle)", time.Duration(s.Cycle))
	}
	return nil
}

// FleetConfig is what lifeboat fleet reads.
type FleetConfig struct {
	// Stores are the store roots (file:// or s3:// URLs) whose clusters
	// the fleet shows; empty: store.url.
	Stores []string `yaml:"stores"`
	// CacheDir is where the fleet keeps the documents it read across
	// runs and restarts (fleet.CacheFile); empty: in memory only.
	CacheDir string `yaml:"cache_dir"`
	// FullEvery is how often lifeboat fleet serve lists every store in
	// full; the refreshes between list only what can have changed (each
	// cluster's agents/ area, and in full the clusters whose agents did
	// something, without agents, or new). 0: every refresh.
	FullEvery time.Duration `yaml:"full_every"`
	// Drills are the hub's drills of every cluster.
	Drills FleetDrillsConfig `yaml:"drills"`
}

// FleetDrillsConfig is how lifeboat fleet serve drills the clusters
// (with drill.scratch_dir, drill.etcd_binary, drill.timeout).
type FleetDrillsConfig struct {
	// Enabled turns the hub's drills on.
	Enabled bool `yaml:"enabled"`
	// Schedule is a cron schedule for every cluster; empty: each
	// cluster's own.
	Schedule string `yaml:"schedule"`
	// Concurrency bounds the drills at once.
	Concurrency int `yaml:"concurrency"`
	// Identities is an age identity file, or a directory of files named
	// by cluster.
	Identities string `yaml:"identities"`
}

// validate checks every fleet store's URL and the drills' settings.
func (f FleetConfig) validate() error {
	if f.FullEvery < 0 {
		return cfgErr("fleet.full_every", "%s: must not be negative", f.FullEvery)
	}
	if f.Drills.Concurrency < 0 {
		return cfgErr("fleet.drills.concurrency", "%d: must not be negative", f.Drills.Concurrency)
	}
	if f.Drills.Schedule != "" {
		if _, err := agent.ParseSchedule(f.Drills.Schedule); err != nil {
			return cfgErr("fleet.drills.schedule", "%q is not a cron schedule (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…): %v", f.Drills.Schedule, err)
		}
	}
	for i, raw := range f.Stores {
		if _, err := uploader.ParseStoreURL(raw); err != nil {
			return cfgErr("fleet.stores", "entry %d: %v", i+1, err)
		}
	}
	return nil
}

// SigningConfig is who signs what this lifeboat writes and whose
// signatures it trusts (see signing and docs/security.md).
type SigningConfig struct {
	// KeyFile is the writer's ed25519 signing key.
	KeyFile string `yaml:"key_file"`
	// TrustedKeys are the public keys whose signatures readers trust.
	TrustedKeys []string `yaml:"trusted_keys"`
	// AllowUnsigned reads unsigned objects (stores written before
	// signing), with a warning.
	AllowUnsigned bool `yaml:"allow_unsigned"`
}

// LineageConfig is about the store's etcd cluster lineage.
type LineageConfig struct {
	// AdoptCluster is an etcd cluster ID (hex) allowed to start a new
	// lineage under the cluster name.
	AdoptCluster string `yaml:"adopt_cluster"`
	// Select is the lineage restores and drills choose from.
	Select string `yaml:"select"`
}

// KitConfig says what the recovery kit holds (see kit.Collect).
type KitConfig struct {
	Paths []string `yaml:"paths"`
	Root  string   `yaml:"root"`
}

// CaptureConfig configures the daemon's continuous capture.
type CaptureConfig struct {
	Enabled         bool          `yaml:"enabled"`
	Interval        time.Duration `yaml:"interval"`
	MaxSegmentBytes int64         `yaml:"max_segment_bytes"`
	MaxBufferBytes  int64         `yaml:"max_buffer_bytes"`
	// Rollover is the least age of a generation before it rolls over
	// to a scheduled snapshot (0: at every one).
	Rollover time.Duration `yaml:"rollover"`
	// CompactionLevels are the spans of the compaction levels ("none":
	// no compaction).
	CompactionLevels []string `yaml:"compaction_levels"`
	// CompactionGrace is how long replaced segments stay.
	CompactionGrace time.Duration `yaml:"compaction_grace"`
}

// compactPolicy is the compaction policy the levels say.
func (c CaptureConfig) compactPolicy() (repository.CompactPolicy, error) {
	p := repository.CompactPolicy{Grace: c.CompactionGrace}
	if c.CompactionGrace < time.Second {
		return p, cfgErr("capture.compaction_grace", "%s: must be at least 1s (a restore that listed the replaced segments must find them)", c.CompactionGrace)
	}
	if len(c.CompactionLevels) == 1 && c.CompactionLevels[0] == "none" {
		return p, nil
	}
	for _, l := range c.CompactionLevels {
		d, err := retention.ParseDuration(l)
		if err != nil {
			return p, cfgErr("capture.compaction_levels", "%q is not a duration (like 30s, 5m, 1h), or none", l)
		}
		p.Levels = append(p.Levels, time.Duration(d))
	}
	if err := p.Validate(); err != nil {
		return p, cfgErr("capture.compaction_levels", "%v", err)
	}
	return p, nil
}

// Bounds of the capture keys (see their rows in optionTable for why).
const (
	minCaptureInterval   = 100 * time.Millisecond
	maxCaptureInterval   = time.Minute
	minCaptureSegment    = 64 << 10
	maxCaptureSegment    = 256 << 20
	maxCaptureBufferSize = 4 << 30
)

// DrillConfig configures restore drills.
type DrillConfig struct {
	ScratchDir    string        `yaml:"scratch_dir"`
	EtcdBinary    string        `yaml:"etcd_binary"`
	CheckPrefixes []string      `yaml:"check_prefixes"`
	Timeout       time.Duration `yaml:"timeout"`
	// Store is the store the agent's scheduled drill proves: primary, a
	// copy's name, or alternate (primary and copies in turn).
	Store string `yaml:"store"`
}

// ScheduleConfig holds cron schedules (robfig/cron: five fields with
// optional seconds, descriptors like @every 30m or @daily, CRON_TZ=…).
// An empty schedule disables that job.
type ScheduleConfig struct {
	Snapshot    string        `yaml:"snapshot"`
	Prune       string        `yaml:"prune"`
	Drill       string        `yaml:"drill"`
	Jitter      time.Duration `yaml:"jitter"`
	RunAtStart  bool          `yaml:"run_at_start"`
	DrillTarget string        `yaml:"drill_target"`
}

// AgentConfig configures the daemon.
type AgentConfig struct {
	Listen          string          `yaml:"listen"`
	Lock            bool            `yaml:"lock"`
	LockTTL         time.Duration   `yaml:"lock_ttl"`
	SnapshotRetries int             `yaml:"snapshot_retries"`
	SkipUnchanged   bool            `yaml:"skip_unchanged"`
	StaleAfter      time.Duration   `yaml:"stale_after"`
	Pushgateway     snapshot.Secret `yaml:"pushgateway"`
	Textfile        string          `yaml:"textfile"`
	ShutdownTimeout time.Duration   `yaml:"shutdown_timeout"`
	CopyInterval    time.Duration   `yaml:"copy_interval"`
}

// NotifyConfig configures webhook notifications.
type NotifyConfig struct {
	Webhooks []snapshot.Secret `yaml:"webhooks"`
	On       []string          `yaml:"on"`
	Timeout  time.Duration     `yaml:"timeout"`
}

// RetentionConfig is the GFS retention policy (restic's forget semantics:
// a backup is kept when any rule keeps it). All zero is an error for
// prune, never "delete everything".
type RetentionConfig struct {
	KeepLast    int      `yaml:"keep_last"`
	KeepHourly  int      `yaml:"keep_hourly"`
	KeepDaily   int      `yaml:"keep_daily"`
	KeepWeekly  int      `yaml:"keep_weekly"`
	KeepMonthly int      `yaml:"keep_monthly"`
	KeepYearly  int      `yaml:"keep_yearly"`
	KeepWithin  Duration `yaml:"keep_within"`
	// ChangesWithin keeps the change segments (and anchors) of every
	// generation whose window overlaps the last ChangesWithin.
	ChangesWithin Duration `yaml:"changes_within"`
	TimeZone      string   `yaml:"time_zone"`
	OrphanGrace   Duration `yaml:"orphan_grace"`
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
		ChangesWithin: time.Duration(r.ChangesWithin),
	}
	if err := p.Validate(); err != nil {
		return retention.Policy{}, &ConfigError{Key: "retention", Err: err}
	}
	return p, nil
}

// LogConfig configures logging.
type LogConfig struct {
	Level  string `yaml:"level"`
	Format string `yaml:"format"`
}

// EtcdConfig is how to reach etcd (etcdctl's names).
type EtcdConfig struct {
	Endpoints   []string        `yaml:"endpoints"`
	CACert      string          `yaml:"cacert"`
	Cert        string          `yaml:"cert"`
	Key         string          `yaml:"key"`
	User        string          `yaml:"user"`
	Password    snapshot.Secret `yaml:"password"`
	DialTimeout time.Duration   `yaml:"dial_timeout"`
	Member      string          `yaml:"member"`
}

// SnapshotConfig tunes taking snapshots.
type SnapshotConfig struct {
	SpoolDir       string        `yaml:"spool_dir"`
	StallTimeout   time.Duration `yaml:"stall_timeout"`
	Timeout        time.Duration `yaml:"timeout"`
	WritebackChunk int64         `yaml:"writeback_chunk"`
	LiveHashKV     string        `yaml:"live_hashkv"`
}

// StoreConfig says where backups go.
type StoreConfig struct {
	URL         string           `yaml:"url"`
	Compression string           `yaml:"compression"`
	S3          S3StoreConfig    `yaml:"s3"`
	ObjectLock  ObjectLockConfig `yaml:"object_lock"`
}

// S3StoreConfig configures s3:// stores. Credentials come from the AWS
// SDK's standard chain (environment, shared config and profiles, web
// identity / IRSA, instance roles), never from this file.
type S3StoreConfig struct {
	Endpoint     string `yaml:"endpoint"`
	Region       string `yaml:"region"`
	PathStyle    bool   `yaml:"path_style"`
	SSE          string `yaml:"sse"`
	SSEKMSKeyID  string `yaml:"sse_kms_key_id"`
	StorageClass string `yaml:"storage_class"`
	PartSize     int64  `yaml:"part_size"`
	Concurrency  int    `yaml:"concurrency"`
	CreateBucket bool   `yaml:"create_bucket"`
	Profile      string `yaml:"profile"`
	MaxAttempts  int    `yaml:"max_attempts"`
}

// ObjectLockConfig requests per-object retention at upload.
type ObjectLockConfig struct {
	Mode      string   `yaml:"mode"`
	Retain    Duration `yaml:"retain"`
	LegalHold bool     `yaml:"legal_hold"`
}

// InspectConfig configures ls, get and diff.
type InspectConfig struct {
	CacheDir         string `yaml:"cache_dir"`
	CacheMaxSize     int64  `yaml:"cache_max_size"`
	EncryptionConfig string `yaml:"encryption_config"`
}

// EncryptionConfig configures age encryption.
type EncryptionConfig struct {
	Recipients     []string `yaml:"recipients"`
	RecipientsFile string   `yaml:"recipients_file"`
	IdentityFile   string   `yaml:"identity_file"`
}

// DefaultConfig returns the defaults: the table's (optionTable), the one
// place they live.
func DefaultConfig() Config {
	var c Config
	for _, o := range options(&c) {
		if o.Default != "" {
			_ = o.set(o.Default) // TestDefaultsParse keeps every default parseable
		}
	}
	return c
}

// ConfigError is a configuration mistake; it makes lifeboat exit 2. It
// says where the wrong value is: the file and line, or the environment
// variable or flag that set it (none for a default).
type ConfigError struct {
	Key string
	Err error
	// File and Line are the configuration file and the line of the key
	// (0: not known).
	File string
	Line int
	// Env is the environment variable, Flag the flag (without --) that
	// set the value, when one did.
	Env, Flag string
}

func (e *ConfigError) Error() string {
	where := "config"
	switch {
	case e.Env != "":
		where = "config: environment " + e.Env
	case e.Flag != "":
		where = "config: --" + e.Flag
	case e.File != "" && e.Line > 0:
		where = fmt.Sprintf("config %s:%d", e.File, e.Line)
	case e.File != "":
		where = "config " + e.File
	}
	switch {
	case e.Key == "":
		return where + ": " + e.Err.Error()
	case e.Env != "" || e.Flag != "":
		return where + " (" + e.Key + "): " + e.Err.Error()
	}
	return where + ": " + e.Key + ": " + e.Err.Error()
}
func (e *ConfigError) Unwrap() error { return e.Err }

func cfgErr(key string, format string, a ...any) error {
	return &ConfigError{Key: key, Err: fmt.Errorf(format, a...)}
}

// Validate checks values; the error names the key that is wrong. The
// steps run in the file's order of keys; the first error is returned.
func (c *Config) Validate() error {
	var store uploader.StoreURL
	for _, step := range []func() error{
		c.validateNames, c.validateEtcd, c.validateSnapshot,
		func() (err error) { store, err = c.parseStore(); return err },
		c.validateRetention, c.validateDrill, c.validateSchedule, c.validateAgent, c.validateNotify,
		c.Capture.validate,
		func() error { return c.Kit.validate(c.Encryption) },
		func() error { return c.validateStore(store) },
		func() error { return c.validateCopies(store) },
		c.validateDrillStore,
		c.Fleet.validate,
		c.Scrub.validate,
	} {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}

// validateNames names the cluster and sets up logging.
func (c *Config) validateNames() error {
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
	return nil
}

// validateEtcd checks how to reach etcd.
func (c *Config) validateEtcd() error {
	if len(c.Etcd.Endpoints) == 0 {
		return cfgErr("etcd.endpoints", "empty: give at least one client URL")
	}
	for i, e := range c.Etcd.Endpoints {
		if err := snapshot.ValidateEndpoint(e); err != nil {
			return cfgErr("etcd.endpoints", "entry %d: %w", i+1, err)
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
	switch m := c.Etcd.Member; m {
	case snapshot.MemberFollower, snapshot.MemberLeader, snapshot.MemberAny:
	default:
		if !strings.Contains(m, ":") {
			return cfgErr("etcd.member", "%q is not follower, leader, any or an endpoint URL", m)
		}
		if err := snapshot.ValidateEndpoint(m); err != nil {
			return cfgErr("etcd.member", "not follower, leader, any or an endpoint URL: %w", err)
		}
	}
	// The rules across keys (the member among the endpoints, no endpoint
	// twice, a user with a password) are the snapshot package's own.
	if err := etcdConfig(c).Validate(); err != nil {
		return &ConfigError{Key: "etcd", Err: err}
	}
	return nil
}

// validateSnapshot checks taking snapshots (and the inspect cache's bound).
func (c *Config) validateSnapshot() error {
	if c.Snapshot.SpoolDir == "" {
		return cfgErr("snapshot.spool_dir", "empty")
	}
	if c.Snapshot.StallTimeout <= 0 {
		return cfgErr("snapshot.stall_timeout", "must be positive")
	}
	if c.Snapshot.Timeout < 0 {
		return cfgErr("snapshot.timeout", "must not be negative")
	}
	if c.Inspect.CacheMaxSize < 0 {
		return cfgErr("inspect.cache_max_size", "must not be negative")
	}
	if c.Snapshot.WritebackChunk < 0 {
		return cfgErr("snapshot.writeback_chunk", "must not be negative")
	}
	if err := snapshot.ValidateLiveHashKV(c.Snapshot.LiveHashKV); err != nil {
		return cfgErr("snapshot.live_hashkv", "%v", err)
	}
	return nil
}

// validateRetention checks the retention policy's keys.
func (c *Config) validateRetention() error {
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
	if c.Retention.ChangesWithin < 0 {
		return cfgErr("retention.changes_within", "must not be negative")
	}
	if c.Retention.OrphanGrace < 0 {
		return cfgErr("retention.orphan_grace", "must not be negative")
	}
	return nil
}

// validateDrill checks the drill keys.
func (c *Config) validateDrill() error {
	if c.Drill.ScratchDir == "" {
		return cfgErr("drill.scratch_dir", "empty")
	}
	if c.Drill.Timeout <= 0 {
		return cfgErr("drill.timeout", "must be positive")
	}
	for _, p := range c.Drill.CheckPrefixes {
		if err := drill.ValidateCheckPrefix(p); err != nil {
			return &ConfigError{Key: "drill.check_prefixes", Err: err}
		}
	}
	return nil
}

// validateSchedule checks the schedules.
func (c *Config) validateSchedule() error {
	for key, spec := range map[string]string{"schedule.snapshot": c.Schedule.Snapshot, "schedule.prune": c.Schedule.Prune, "schedule.drill": c.Schedule.Drill} {
		if spec == "" {
			continue
		}
		if _, err := agent.ParseSchedule(spec); err != nil {
			return cfgErr(key, "%q is not a cron schedule (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…): %v", spec, err)
		}
	}
	if c.Schedule.Jitter < 0 {
		return cfgErr("schedule.jitter", "must not be negative")
	}
	if c.Schedule.DrillTarget != "latest" && c.Schedule.DrillTarget != "random" {
		return cfgErr("schedule.drill_target", "%q is not latest or random", c.Schedule.DrillTarget)
	}
	return nil
}

// validateAgent checks the daemon's keys, and the orphan grace against the longest snapshot.
func (c *Config) validateAgent() error {
	if _, _, err := net.SplitHostPort(c.Agent.Listen); err != nil && c.Agent.Listen != "" {
		return cfgErr("agent.listen", "%q is not host:port", c.Agent.Listen)
	}
	if c.Agent.LockTTL < agent.MinLockTTL {
		return cfgErr("agent.lock_ttl", "must be at least %s", agent.MinLockTTL)
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
	if c.Agent.CopyInterval < time.Second {
		return cfgErr("agent.copy_interval", "%s: must be at least 1s", c.Agent.CopyInterval)
	}
	if p := c.Agent.Pushgateway.Reveal(); p != "" && !strings.HasPrefix(p, "http://") && !strings.HasPrefix(p, "https://") {
		return cfgErr("agent.pushgateway", "must be an http(s) URL")
	}
	return nil
}

// validateNotify checks the notifications.
func (c *Config) validateNotify() error {
	for i, w := range c.Notify.Webhooks {
		if err := agent.ValidateWebhook(w); err != nil {
			return cfgErr("notify.webhooks", "entry %d %w", i+1, err)
		}
	}
	for _, e := range c.Notify.On {
		if err := agent.ValidateEvent(e); err != nil {
			return &ConfigError{Key: "notify.on", Err: err}
		}
	}
	if c.Notify.Timeout <= 0 {
		return cfgErr("notify.timeout", "must be positive")
	}
	return nil
}

// parseStore parses store.url and checks store.compression.
func (c *Config) parseStore() (uploader.StoreURL, error) {
	store, err := uploader.ParseStoreURL(c.Store.URL)
	if err != nil {
		return store, &ConfigError{Key: "store.url", Err: err}
	}
	if err := repository.ValidateCompression(c.Store.Compression); err != nil {
		return store, &ConfigError{Key: "store.compression", Err: err}
	}
	return store, nil
}

// validateStore checks the primary store's Object Lock and S3 settings.
func (c *Config) validateStore(store uploader.StoreURL) error {
	if err := validateLock("store.object_lock", c.Store.ObjectLock, store); err != nil {
		return err
	}
	if store.Scheme == "s3" {
		if err := c.s3Config(store).Validate(); err != nil {
			return &ConfigError{Key: "store", Err: err}
		}
	}
	return nil
}

// validateLock checks an object_lock block (key) of a store at u.
func validateLock(key string, l ObjectLockConfig, u uploader.StoreURL) error {
	if m := l.Mode; m != "" {
		if err := uploader.ValidateLockMode(m); err != nil {
			return &ConfigError{Key: key + ".mode", Err: err}
		}
		if l.Retain <= 0 {
			return cfgErr(key+".retain", "must be set (e.g. 30d) when %s.mode is set", key)
		}
	} else if l.Retain != 0 {
		return cfgErr(key+".mode", "must be set (GOVERNANCE or COMPLIANCE) when %s.retain is set", key)
	}
	if u.Scheme == "file" && (l.Mode != "" || l.LegalHold) {
		return cfgErr(key+".mode", "Object Lock needs an s3:// store")
	}
	return nil
}

// validateDrillStore checks drill.store: primary, alternate or a copy's name.
func (c *Config) validateDrillStore() error {
	switch c.Drill.Store {
	case storePrimary, storeAlternate:
		return nil
	}
	var names []string
	for _, cc := range c.Copies {
		if cc.Name == c.Drill.Store {
			return nil
		}
		names = append(names, cc.Name)
	}
	return cfgErr("drill.store", "%q is not primary, alternate or the name of a copy (copies: %s)", c.Drill.Store, strings.Join(append(names, "none")[:max(1, len(names))], ", "))
}

// s3Config builds the S3 store's configuration for an s3:// store URL.
// With Object Lock configured, a bucket it creates has Object Lock.
func (c *Config) s3Config(u uploader.StoreURL) uploader.S3Config {
	sc := s3Config(u, c.Store.S3)
	sc.ObjectLock = c.Store.ObjectLock.Mode != "" || c.Store.ObjectLock.LegalHold
	return sc
}

// s3Config builds an S3 store's configuration from its URL and settings.
func s3Config(u uploader.StoreURL, s S3StoreConfig) uploader.S3Config {
	return uploader.S3Config{
		Bucket: u.Bucket, Prefix: u.Prefix,
		Endpoint: s.Endpoint, Region: s.Region, PathStyle: s.PathStyle,
		SSE: s.SSE, SSEKMSKeyID: s.SSEKMSKeyID, StorageClass: s.StorageClass,
		PartSize: s.PartSize, Concurrency: s.Concurrency, CreateBucket: s.CreateBucket,
		Profile: s.Profile, MaxAttempts: s.MaxAttempts,
	}
}

// withScheme gives an endpoint written without a scheme, as etcdctl
// accepts it (127.0.0.1:2379), https:// when TLS is configured, else
// http://. Anything else is returned unchanged (and validated later).
func withScheme(e string, tls bool) string {
	if e == "" || strings.Contains(e, "://") || strings.HasPrefix(e, "unix:") || strings.HasPrefix(e, "unixs:") {
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

// validate checks the capture keys, whether capture is enabled or not (a
// value that would be refused later must not wait for capture to be
// turned on).
func (c CaptureConfig) validate() error {
	if c.Interval < minCaptureInterval || c.Interval > maxCaptureInterval {
		return cfgErr("capture.interval", "%s: must be between %s and %s (below, every flush is a store request for no gain over the store's latency; above, the recovery point trails by more than a minute)",
			c.Interval, minCaptureInterval, maxCaptureInterval)
	}
	if c.MaxSegmentBytes < minCaptureSegment || c.MaxSegmentBytes > maxCaptureSegment {
		return cfgErr("capture.max_segment_bytes", "%d: must be between 64KiB and 256MiB", c.MaxSegmentBytes)
	}
	if c.MaxBufferBytes < c.MaxSegmentBytes {
		return cfgErr("capture.max_buffer_bytes", "%d is below capture.max_segment_bytes %d: a segment is built in the buffer; raise it or lower capture.max_segment_bytes", c.MaxBufferBytes, c.MaxSegmentBytes)
	}
	if c.MaxBufferBytes > maxCaptureBufferSize {
		return cfgErr("capture.max_buffer_bytes", "%d: must be at most 4GiB", c.MaxBufferBytes)
	}
	if c.Rollover < 0 {
		return cfgErr("capture.rollover", "%s: must not be negative", c.Rollover)
	}
	_, err := c.compactPolicy()
	return err
}
