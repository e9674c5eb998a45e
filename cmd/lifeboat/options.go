package main

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// group is a set of option groups: what an option is about, and so which
// commands take it as a flag.
type group uint32

const (
	groupGlobal     group = 1 << iota   // logging: every command
	groupEtcd                           // reaching etcd
	groupStore                          // where backups are
	groupUpload                         // how objects are written to the store
	groupEncryption                     // age encryption and decryption
	groupSpool                          // where a raw snapshot is staged on disk
	groupSnapshot                       // taking a snapshot
	groupRetention                      // what prune keeps
	groupDrill                          // restore drills
	groupSchedule                       // the agent's schedules
	groupAgent                          // the daemon
	groupCapture                        // the daemon's continuous capture
	groupNotify                         // webhook notifications
	groupInspect                        // ls, get and diff: the local cache, Kubernetes encryption at rest
	groupKit                            // the recovery kit: files outside etcd a restore on new hosts needs
	groupCopies                         // further stores that hold copies of the backups
	groupTrust                          // signing keys, trusted keys and the store's lineage
	groupFleet                          // the stores lifeboat fleet reads
	groupScrub                          // the scrub: every retained object checked, a rotating share read
	groupKubernetes                     // the agent's objects in the Kubernetes API
	groupTakes                          // qualifier: read only by commands that take backups (snapshot, agent, demo)
	groupCreates                        // qualifier: read only by commands that may create a store (the backup takers, copy)
	groupAll        group = 1<<iota - 1 // every group above
)

// qualifiers narrow an option's groups: an option with one is a flag only
// of commands that have its groups and the qualifier (encryption's
// recipients are the writers', not ls's). They are never a section.
const qualifiers = groupTakes | groupCreates

// shows reports whether a command of groups g lists option groups o in
// its help: one of o's groups is g's, and so are o's qualifiers.
func (g group) shows(o group) bool {
	return o&^qualifiers&g != 0 && o&qualifiers&^g == 0
}

// groupNames name the groups in help and in docs/configuration.md, in
// this order.
var groupNames = []struct {
	g     group
	name  string
	title string
	doc   string // a line for docs/configuration.md
}{
	{groupGlobal, "global", "Logging", ""},
	{groupEtcd, "etcd", "etcd connection", "etcdctl's names and variables, so existing scripts carry over."},
	{groupStore, "store", "Store", "S3 takes credentials from the AWS SDK's chain, never from here: see [S3-compatible storage](s3.md)."},
	{groupUpload, "upload", "Upload", "How data objects (and drill reports) are written."},
	{groupEncryption, "encryption", "Encryption", "See [Encryption](encryption.md)."},
	{groupSpool, "spool", "Spool", ""},
	{groupSnapshot, "snapshot", "Snapshot", "See [\"How `lifeboat snapshot` works\"](commands.md#how-lifeboat-snapshot-works)."},
	{groupRetention, "retention", "Retention", "All off by default: prune refuses an empty policy. See [Retention and prune](retention.md)."},
	{groupDrill, "drill", "Drill", "See [Drills](drills.md)."},
	{groupSchedule, "schedule", "Schedules", "The agent's cron schedules (robfig/cron); an empty schedule disables the job. See [The agent](agent.md)."},
	{groupAgent, "agent", "Agent", "See [The agent](agent.md)."},
	{groupCapture, "capture", "Capture", "Continuous capture of etcd's changes for point-in-time recovery: the daemon only (`lifeboat agent`, not `--once`), under the leader lock. See [The agent](agent.md#continuous-capture)."},
	{groupNotify, "notify", "Notifications", ""},
	{groupInspect, "inspect", "Inspect", "`ls`, `get` and `diff`. See [Looking inside backups](inspect.md)."},
	{groupKit, "kit", "Recovery kit", "The files outside etcd that a restore on new hosts needs, stored encrypted with every backup. See [The recovery kit](kit.md)."},
	{groupCopies, "copies", "Copies", "Further stores, each a complete store, that the agent and `lifeboat copy` keep in step with the primary. See [Copies](copies.md)."},
	{groupTrust, "trust", "Signing and lineage", "Who may write what lifeboat trusts: the agent's signing key, the public keys readers trust, and the one etcd cluster lineage a cluster name holds. See [Security](security.md)."},
	{groupFleet, "fleet", "Fleet", "`lifeboat fleet status`: every cluster of several stores in one view. See [The fleet](fleet.md)."},
	{groupKubernetes, "kubernetes", "Kubernetes objects", "`kubectl get etcdbackups`: the agent (daemon and `--once`) mirrors the store into EtcdBackup objects and an EtcdRecoverability object after every job, with Events on failures; the Helm chart installs the CRDs and sets these. See [Kubernetes](deploy-kubernetes.md#kubectl-get-etcdbackups)."},
	{groupScrub, "scrub", "Scrub", "Every retained object checked each run (exists, size, encryption header), a rotating share read in full. See [Scrub](scrub.md)."},
}

// sharedGroups say where the cluster, the store and the scratch space
// are: one set of these flags serves every command (scripts and tests pass
// the same --endpoints, --store, --spool-dir, --scratch-dir, --identity-file
// to snapshot, list, verify and drill alike), so every command that reads
// the store accepts them, hidden from its help where they are not its own.
const sharedGroups = groupEtcd | groupStore | groupUpload | groupEncryption | groupSpool | groupDrill | groupTrust

// commandKeys are options outside a command's groups that it still takes
// as hidden flags because they change what it does: prune's orphan grace
// has a floor of (agent.snapshot_retries + 1) x snapshot.timeout, so
// `prune --timeout 2h` raises it as it did before flags were grouped.
var commandKeys = map[string][]string{
	"prune": {"snapshot.timeout", "agent.snapshot_retries"},
}

// commandGroups are the option groups each command shows as flags (and
// takes, with sharedGroups). A command reads every key from the file and
// the environment; its flags are the keys that change what it does.
var commandGroups = map[string]group{
	"snapshot": groupEtcd | groupStore | groupUpload | groupEncryption | groupSpool | groupSnapshot | groupKit | groupTrust | groupTakes | groupCreates,
	"list":     groupStore | groupCopies | groupTrust,
	"copy":     groupStore | groupCopies | groupRetention | groupTrust | groupCreates,
	"log":      groupStore | groupEncryption | groupTrust,
	"verify":   groupStore | groupEncryption | groupSpool | groupTrust,
	"fetch":    groupStore | groupEncryption | groupSpool | groupTrust,
	"restore":  groupStore | groupEncryption | groupSpool | groupDrill | groupTrust,
	"drill":    groupStore | groupUpload | groupEncryption | groupSpool | groupDrill | groupTrust,
	"prune":    groupStore | groupRetention | groupCopies | groupTrust,
	"scrub":    groupStore | groupEncryption | groupCopies | groupTrust | groupScrub,
	"ls":       groupStore | groupEncryption | groupInspect | groupTrust,
	"get":      groupStore | groupEncryption | groupInspect | groupTrust,
	"diff":     groupStore | groupEncryption | groupInspect | groupTrust,
	"demo":     groupStore | groupUpload | groupEncryption | groupDrill | groupTakes | groupCreates,
	"agent":    groupAll,
	"check":    groupAll, // config check

	// The kit's subcommands, by parent and name (see newRootCmd's bind).
	"kit list":    groupStore | groupTrust,
	"kit show":    groupStore | groupEncryption | groupTrust,
	"kit verify":  groupStore | groupEncryption | groupTrust,
	"kit restore": groupStore | groupEncryption | groupTrust,

	// The fleet reads stores only.
	"fleet status": groupStore | groupTrust | groupFleet,
	"fleet serve":  groupStore | groupTrust | groupFleet | groupDrill,
}

// optionDef is one configuration key: its flag, extra environment names,
// default, help and groups. Its type (and whether it is a secret) is the
// type of the Config field at Key: one declaration each.
type optionDef struct {
	// Key is the YAML path (etcd.endpoints); LIFEBOAT_ETCD_ENDPOINTS is
	// its environment variable (envName).
	Key string
	// Flag is the command-line flag (etcdctl's names for etcd).
	Flag string
	// Env are further environment names, read when the LIFEBOAT_* one is
	// unset (etcdctl's, so that existing scripts carry over).
	Env []string
	// Default is the default in the flags' syntax; "" is none.
	Default string
	// Help is the one-line help of the flag and the docs.
	Help string
	// Doc is more for docs/configuration.md only.
	Doc string
	// Groups say what the option is about (the first one: its section in
	// help and docs) and so which commands take it as a flag.
	Groups group
}

// optionTable is every configuration key, in the file's order: the one
// source of flags, environment names, defaults, help and the
// configuration reference (docs/configuration.md).
var optionTable = []optionDef{
	{Key: "cluster", Flag: "cluster", Default: "default", Groups: groupStore,
		Help: "cluster name inside the store (several clusters can share one)"},
	{Key: "log.level", Flag: "log-level", Default: "info", Groups: groupGlobal,
		Help: "debug, info, warn or error"},
	{Key: "log.format", Flag: "log-format", Default: "auto", Groups: groupGlobal,
		Help: "auto (text on a terminal, else JSON), text or json"},

	{Key: "etcd.endpoints", Flag: "endpoints", Env: []string{"ETCDCTL_ENDPOINTS"}, Default: "http://127.0.0.1:2379", Groups: groupEtcd,
		Help: "etcd client URLs (http, https, unix; host:port means http, or https with TLS flags)"},
	{Key: "etcd.cacert", Flag: "cacert", Env: []string{"ETCDCTL_CACERT"}, Groups: groupEtcd,
		Help: "CA bundle for etcd's TLS"},
	{Key: "etcd.cert", Flag: "cert", Env: []string{"ETCDCTL_CERT"}, Groups: groupEtcd,
		Help: "client certificate for etcd"},
	{Key: "etcd.key", Flag: "key", Env: []string{"ETCDCTL_KEY"}, Groups: groupEtcd,
		Help: "client key for etcd"},
	{Key: "etcd.user", Flag: "user", Env: []string{"ETCDCTL_USER"}, Groups: groupEtcd,
		Help: "etcd user"},
	{Key: "etcd.password", Flag: "password", Env: []string{"ETCDCTL_PASSWORD"}, Groups: groupEtcd,
		Help: "etcd password (prefer ETCDCTL_PASSWORD or the config file)"},
	{Key: "etcd.dial_timeout", Flag: "dial-timeout", Env: []string{"ETCDCTL_DIAL_TIMEOUT"}, Default: "5s", Groups: groupEtcd,
		Help: "timeout to connect to each member"},
	{Key: "etcd.member", Flag: "member", Default: snapshot.MemberFollower, Groups: groupEtcd,
		Help: "member to snapshot: follower, leader, any, or an endpoint URL"},

	{Key: "snapshot.spool_dir", Flag: "spool-dir", Default: "/var/lib/lifeboat/spool", Groups: groupSpool,
		Help: "directory for the raw snapshot during verification",
		Doc:  "needs the db's size free (checked before a snapshot or restore starts); put it on another disk than etcd's data dir when write latency matters (see [benchmarks.md](benchmarks.md)); the spool is written back as it fills and freed in 32 MiB steps, so neither its writing nor its removal holds etcd's WAL syncs on a shared disk. Capture also holds here, beyond an eighth of capture.max_buffer_bytes, the changes it receives while a new generation's snapshot is stored (unnamed files, gone when done)"},
	{Key: "snapshot.stall_timeout", Flag: "stall-timeout", Default: "30s", Groups: groupSnapshot,
		Help: "fail when the snapshot stream stalls this long"},
	{Key: "snapshot.timeout", Flag: "timeout", Default: "30m", Groups: groupSnapshot,
		Help: "overall backup timeout (0: none)"},
	{Key: "snapshot.writeback_chunk", Flag: "writeback-chunk", Default: "8MiB", Groups: groupSnapshot,
		Help: "bytes written before writeback starts (0: kernel default)"},
	{Key: "snapshot.live_hashkv", Flag: "live-hashkv", Default: snapshot.LiveHashKVAlways, Groups: groupSnapshot,
		Help: "compare HashKV with a live member: always (another member when one answers), auto (defer on a single-member cluster) or defer (leave it to the drill)"},

	{Key: "store.url", Flag: "store", Default: "file:///var/lib/lifeboat/backups", Groups: groupStore,
		Help: "backup store: file:///path or s3://bucket/prefix"},
	{Key: "store.compression", Flag: "compression", Default: "zstd", Groups: groupUpload,
		Help: "the snapshot's: zstd, s2 (half zstd's CPU, objects about a third larger) or none"},
	{Key: "store.s3.endpoint", Flag: "s3-endpoint", Groups: groupStore,
		Help: "S3-compatible endpoint URL (default: AWS_ENDPOINT_URL_S3 or AWS)"},
	{Key: "store.s3.region", Flag: "s3-region", Groups: groupStore,
		Help: "S3 region (default: the AWS SDK chain, then us-east-1)"},
	{Key: "store.s3.path_style", Flag: "s3-path-style", Groups: groupStore,
		Help: "path-style bucket addressing (MinIO, Ceph, versitygw)"},
	{Key: "store.s3.sse", Flag: "s3-sse", Groups: groupUpload,
		Help: "server-side encryption: AES256 or aws:kms"},
	{Key: "store.s3.sse_kms_key_id", Flag: "s3-sse-kms-key-id", Groups: groupUpload,
		Help: "KMS key id for --s3-sse aws:kms"},
	{Key: "store.s3.storage_class", Flag: "s3-storage-class", Groups: groupUpload,
		Help: "storage class of new objects (e.g. STANDARD_IA)"},
	{Key: "store.s3.part_size", Flag: "s3-part-size", Groups: groupUpload,
		Help: "multipart part size, 5MiB to 5GiB (default 5MiB)"},
	{Key: "store.s3.concurrency", Flag: "s3-concurrency", Groups: groupUpload,
		Help: "parts uploaded at once (default 3)"},
	{Key: "store.s3.create_bucket", Flag: "s3-create-bucket", Groups: groupStore | groupCreates,
		Help: "create the bucket when it does not exist (with Object Lock enabled when store.object_lock is set)"},
	{Key: "store.s3.profile", Flag: "s3-profile", Groups: groupStore,
		Help: "AWS shared config profile"},
	{Key: "store.s3.max_attempts", Flag: "s3-max-attempts", Groups: groupStore,
		Help: "attempts per S3 request, with exponential backoff and jitter (default 8)"},
	{Key: "store.object_lock.mode", Flag: "object-lock-mode", Groups: groupUpload,
		Help: "S3 Object Lock mode for every object a restore reads (data objects, manifests, kits, segments, markers): GOVERNANCE or COMPLIANCE",
		Doc:  "S3 Object Lock mode for every object a restore reads: GOVERNANCE or COMPLIANCE. Data objects, manifests, drill reports, kits, sealed markers and top-level compacted segments are locked for store.object_lock.retain; segments and markers that compaction or a newer marker replaces, for as long as that takes (see [S3, Object Lock](s3.md#object-lock))"},
	{Key: "store.object_lock.retain", Flag: "object-lock-retain", Groups: groupUpload,
		Help: "Object Lock retention of what a restore reads, from when it is written, e.g. 30d"},
	{Key: "store.object_lock.legal_hold", Flag: "object-lock-legal-hold", Groups: groupUpload,
		Help: "put a legal hold on every object locked for the full retention"},

	{Key: "copies", Flag: "copy", Groups: groupCopies,
		Help: "a further store (file:///path or s3://bucket/prefix) that holds copies of the backups; repeatable",
		Doc:  "in the file, a list of stores, each `name` (required: lower-case letters, digits, hyphens; the label in metrics, logs, `list` and `drill.store`), `url`, and optionally `s3` (the keys of store.s3; absent: the primary's), `object_lock` (the keys of store.object_lock; absent: none) and `retention` (the keys of retention; absent: the primary's policy). A flag or LIFEBOAT_COPIES (comma-separated) names them copy1, copy2, … with the primary's S3 settings and policy, and replaces the file's list"},

	{Key: "encryption.recipients", Flag: "recipient", Groups: groupEncryption | groupTakes,
		Help: "age recipient (age1…) to encrypt backups to; repeatable"},
	{Key: "encryption.recipients_file", Flag: "recipients-file", Groups: groupEncryption | groupTakes,
		Help: "file of age recipients, one per line"},
	{Key: "encryption.identity_file", Flag: "identity-file", Groups: groupEncryption,
		Help: "age identity file to decrypt backups (restore, drill, verify)"},

	{Key: "signing.key_file", Flag: "signing-key", Env: []string{"LIFEBOAT_SIGNING_KEY"}, Groups: groupTrust,
		Help: "ed25519 signing key (lifeboat keygen -o FILE): every manifest, drill report and progress marker written is signed with it",
		Doc:  "the writer's (agent, snapshot, drill); its public key is trusted too. Keep it on the cluster's nodes only, never with the store's credentials"},
	{Key: "signing.trusted_keys", Flag: "trusted-key", Env: []string{"LIFEBOAT_TRUSTED_KEYS"}, Groups: groupTrust,
		Help: "public key (lifeboat-ed25519:…) whose signatures readers trust; repeatable",
		Doc:  "with any trusted key (or a signing key), what is not signed by one of them is untrusted: listed as such, never restored, drilled, copied or counted by prune. Several at once for a rotation. Configured, never taken from the store"},
	{Key: "signing.allow_unsigned", Flag: "allow-unsigned", Groups: groupTrust,
		Help: "read unsigned objects (a store written before signing), with a warning for each",
		Doc:  "signed objects must still verify; turn it off once every retained backup is signed"},
	{Key: "lineage.adopt_cluster", Flag: "adopt-cluster", Groups: groupTrust | groupTakes,
		Help: "etcd cluster ID (hex) allowed to start a new lineage under this cluster name, after a rebuild lifeboat did not restore",
		Doc:  "a snapshot of a cluster that is not of the name's lineage is refused (exit 2) and names the ID to give here; the new lineage supersedes the old one for `restore latest`, whose backups stay listed apart"},
	{Key: "lineage.select", Flag: "lineage", Groups: groupTrust,
		Help: "the lineage (etcd cluster ID of its founder) that latest, random and --to-time choose from, when the store holds more than one"},

	{Key: "retention.keep_last", Flag: "keep-last", Groups: groupRetention,
		Help: "keep the newest backup of each of the N newest distinct states (backups of one revision and HashKV count once)"},
	{Key: "retention.keep_hourly", Flag: "keep-hourly", Groups: groupRetention,
		Help: "keep the newest backup of each of the last N hours (-1: all)"},
	{Key: "retention.keep_daily", Flag: "keep-daily", Groups: groupRetention,
		Help: "keep the newest backup of each of the last N days (-1: all)"},
	{Key: "retention.keep_weekly", Flag: "keep-weekly", Groups: groupRetention,
		Help: "keep the newest backup of each of the last N ISO weeks (-1: all)"},
	{Key: "retention.keep_monthly", Flag: "keep-monthly", Groups: groupRetention,
		Help: "keep the newest backup of each of the last N months (-1: all)"},
	{Key: "retention.keep_yearly", Flag: "keep-yearly", Groups: groupRetention,
		Help: "keep the newest backup of each of the last N years (-1: all)"},
	{Key: "retention.keep_within", Flag: "keep-within", Groups: groupRetention,
		Help: "keep every backup younger than this, e.g. 7d"},
	{Key: "retention.changes_within", Flag: "changes-within", Groups: groupRetention,
		Help: "keep the change segments of every capture generation whose window overlaps the last D, and their anchor snapshots, e.g. 7d",
		Doc:  "0 (the default) keeps the segments of every generation whose anchor snapshot the keep_* rules keep; the newest generation is always kept. See [point-in-time recovery](pitr-reference.md#retention-rollover-and-compaction)"},
	{Key: "retention.time_zone", Flag: "retention-time-zone", Default: "UTC", Groups: groupRetention,
		Help: "time zone of the calendar buckets (IANA name)"},
	{Key: "retention.orphan_grace", Flag: "orphan-grace", Default: "24h", Groups: groupRetention,
		Help: "age before orphaned objects and incomplete uploads are removed"},

	{Key: "drill.scratch_dir", Flag: "scratch-dir", Default: "/var/lib/lifeboat/scratch", Groups: groupDrill,
		Help: "drill scratch directory (needs the db size free, twice for a point-in-time drill; emptied after every drill, its large files freed in 32 MiB steps)"},
	{Key: "drill.etcd_binary", Flag: "etcd-binary", Groups: groupDrill,
		Help: "run drills with this etcd binary instead of the embedded server",
		Doc:  "to match the cluster's version; default: lifeboat's own (`lifeboat __etcd`, a child process)"},
	{Key: "drill.check_prefixes", Flag: "check-prefix", Groups: groupDrill,
		Help: "a key prefix that must hold keys after restore (repeatable), e.g. /registry/namespaces/"},
	{Key: "drill.timeout", Flag: "drill-timeout", Default: "15m", Groups: groupDrill,
		Help: "bound of one drill"},
	{Key: "drill.store", Flag: "drill-store", Default: "primary", Groups: groupDrill,
		Help: "the store the agent's scheduled drill proves: primary, a copy's name, or alternate (the primary and each copy in turn)",
		Doc:  "the report is written to the store drilled; `lifeboat drill --store URL` drills any store by hand"},

	{Key: "schedule.snapshot", Flag: "snapshot-schedule", Default: "@every 1h", Groups: groupSchedule,
		Help: "cron schedule of snapshots (5 fields with optional seconds, @every 30m, @daily, CRON_TZ=…; empty disables)"},
	{Key: "schedule.prune", Flag: "prune-schedule", Groups: groupSchedule,
		Help: "cron schedule of prune (set it with a retention policy)"},
	{Key: "schedule.drill", Flag: "drill-schedule", Default: "@daily", Groups: groupSchedule,
		Help: "cron schedule of drills"},
	{Key: "schedule.jitter", Flag: "jitter", Groups: groupSchedule,
		Help: "random delay up to this before each run"},
	{Key: "schedule.run_at_start", Flag: "run-at-start", Groups: groupSchedule,
		Help: "take a snapshot at start"},
	{Key: "schedule.drill_target", Flag: "drill-target", Default: "latest", Groups: groupSchedule,
		Help: "latest or random (an older retained backup)"},

	{Key: "agent.listen", Flag: "listen", Default: "127.0.0.1:9469", Groups: groupAgent,
		Help: "HTTP address for /metrics /healthz /readyz /status"},
	{Key: "agent.lock", Flag: "lock", Default: "true", Groups: groupAgent,
		Help: "coordinate agents with a lock in etcd"},
	{Key: "agent.lock_ttl", Flag: "lock-ttl", Default: "30s", Groups: groupAgent,
		Help: "lease TTL of the lock: how soon a dead agent's lock expires"},
	{Key: "agent.snapshot_retries", Flag: "snapshot-retries", Default: "2", Groups: groupAgent,
		Help: "retries of a failed snapshot, with backoff"},
	{Key: "agent.skip_unchanged", Flag: "skip-unchanged-snapshots", Default: "true", Groups: groupAgent,
		Help: "do not store a scheduled snapshot of a cluster unchanged since its newest backup",
		Doc:  "unchanged: every reachable member at the newest intact, trusted backup's revision (of this etcd cluster and lineage) with its HashKV there equal to the backup's. The run is a success (the log says so, `lifeboat_snapshot_unchanged_total` counts it, `lifeboat_job_last_success_timestamp_seconds` advances, the status document names the backup); capture's snapshots are always stored. `lifeboat snapshot` stores every time unless given its own `--skip-unchanged`"},
	{Key: "agent.stale_after", Flag: "stale-after", Default: "3h", Groups: groupAgent,
		Help: "the newest backup is stale after this"},
	{Key: "agent.pushgateway", Flag: "pushgateway", Groups: groupAgent,
		Help: "agent --once: push metrics to this Pushgateway URL (may hold user:password@)"},
	{Key: "agent.textfile", Flag: "textfile", Groups: groupAgent,
		Help: "agent --once: write metrics to this file for node_exporter"},
	{Key: "agent.shutdown_timeout", Flag: "shutdown-timeout", Default: "30s", Groups: groupAgent,
		Help: "bound of a graceful shutdown"},
	{Key: "agent.copy_interval", Flag: "copy-interval", Default: "1m", Groups: groupAgent | groupCopies,
		Help: "how often the agent catches its copies up besides after every backup: change segments reach the copies within about this (failures are retried with backoff up to it)"},

	{Key: "capture.enabled", Flag: "capture", Env: []string{"LIFEBOAT_CAPTURE"}, Default: "false", Groups: groupCapture,
		Help: "capture every change between snapshots for point-in-time restore (the daemon only; agent --once refuses it)"},
	{Key: "capture.interval", Flag: "capture-interval", Default: "1s", Groups: groupCapture,
		Help: "how often captured changes are made durable in the store: the recovery point's usual lag (100ms to 1m)",
		Doc:  "below 100ms every flush is a store request (S3 PUTs cost and are rate-limited) for no gain over the store's own latency; above 1m the recovery point trails by more than LifeboatCaptureLagging allows and more changes wait in memory"},
	{Key: "capture.max_segment_bytes", Flag: "capture-max-segment-bytes", Default: "8MiB", Groups: groupCapture,
		Help: "raw size at which a change segment is flushed before its interval (64KiB to 256MiB)"},
	{Key: "capture.max_buffer_bytes", Flag: "capture-max-buffer-bytes", Default: "32MiB", Groups: groupCapture,
		Help: "memory bound of changes not yet durable (at least capture.max_segment_bytes, at most 4GiB)",
		Doc:  "while a new generation's snapshot is stored, the changes received meanwhile are held in memory up to an eighth of it (4 MiB by default; the rest in snapshot.spool_dir); a compacted segment holds at most half of it (16 MiB by default) of raw changes, so that compaction's memory stays within the capture's"},
	{Key: "capture.rollover", Flag: "capture-rollover", Default: "24h", Groups: groupCapture,
		Help: "a capture generation at least this old rolls over to the next scheduled snapshot, so that retention.changes_within drops older ones whole (0: at every scheduled snapshot)",
		Doc:  "each retained generation keeps its anchor snapshot: shorter means more snapshots kept for the same changes_within, longer means up to this much more changes kept beyond it"},
	{Key: "capture.compaction_levels", Flag: "capture-compaction-levels", Default: "30s,5m,1h", Groups: groupCapture,
		Help: "spans of the compaction levels: segments are merged per closed span of each level as they age, so a window of any length is a few dozen objects (each a multiple of the one before; none: no compaction)",
		Doc:  "compaction reads segments back: with age encryption it needs encryption.identity_file, and without one capture logs that it does not compact (generations still roll over at every scheduled snapshot, so retention.changes_within still bounds the store)"},
	{Key: "capture.compaction_grace", Flag: "capture-compaction-grace", Default: "10m", Groups: groupCapture,
		Help: "how long the segments a compacted one replaced stay in the store before they are deleted: a restore or log that listed them before the compaction can still read them (at least 1s); each copy keeps them as long after it took the compacted one"},

	{Key: "notify.webhooks", Flag: "webhook", Groups: groupNotify,
		Help: "notification webhook URL (repeatable; a comma inside a URL is kept)",
		Doc:  "a webhook's path and query are usually its token"},
	{Key: "notify.on", Flag: "notify-on", Default: "drill_failed,snapshot_failed,stale", Groups: groupNotify,
		Help: "events to notify: drill_failed, snapshot_failed, prune_failed, stale"},
	{Key: "notify.timeout", Flag: "notify-timeout", Default: "10s", Groups: groupNotify,
		Help: "timeout of one webhook attempt"},

	{Key: "inspect.cache_dir", Flag: "cache-dir", Groups: groupInspect,
		Help: "where ls, get and diff keep fetched backups (default: the user's cache dir, ~/.cache/lifeboat)",
		Doc:  "0700; each backup is fetched, checked and indexed once, then served from here"},
	{Key: "inspect.cache_max_size", Flag: "cache-max-size", Default: "20GiB", Groups: groupInspect,
		Help: "size bound of the cache: least recently used backups are removed beyond it"},
	{Key: "inspect.encryption_config", Flag: "encryption-config", Groups: groupInspect,
		Help: "kube-apiserver's EncryptionConfiguration file, to decrypt values encrypted at rest (aescbc, aesgcm, secretbox)",
		Doc:  "it holds keys: keep it 0600; KMS-encrypted values cannot be decrypted offline"},

	{Key: "kit.paths", Flag: "kit-path", Groups: groupKit,
		Help: "what the recovery kit of every backup holds: kubeadm, k3s, or an absolute file or directory (repeatable)",
		Doc:  "kubeadm: /etc/kubernetes/pki and the EncryptionConfiguration that /etc/kubernetes/manifests/kube-apiserver.yaml names with --encryption-provider-config; k3s: /var/lib/rancher/k3s/server/token, server/tls and server/cred. Needs encryption.recipients: a kit is stored only encrypted. A backup fails when a file the kit names is missing"},
	{Key: "kit.root", Flag: "kit-root", Default: "/", Groups: groupKit,
		Help: "the directory kit.paths are read below (a host's root mounted elsewhere, e.g. /host in a container)"},

	{Key: "fleet.stores", Flag: "fleet-store", Groups: groupFleet,
		Help: "a store root (file:///path or s3://bucket/prefix) whose every cluster lifeboat fleet shows; repeatable",
		Doc:  "empty: store.url. Each is read with the store.s3 settings and the AWS credential chain; read-only credentials are enough. An explicit --store shows that store alone"},

	{Key: "fleet.cache_dir", Flag: "fleet-cache-dir", Groups: groupFleet,
		Help: "directory where lifeboat fleet keeps the documents it read (manifests, drill reports, status documents) across runs and restarts; empty: none",
		Doc:  "fleet-cache.v2/: a file per cluster (0600, the directories 0700), loaded only while that cluster is read, so the hub's memory does not grow with every backup of the fleet (without it fleet serve uses a temporary directory removed when it stops, fleet status memory), keyed by each object's key, size and time as listed: an object listed otherwise is read again, a missing one is never served. A corrupt or older cache is ignored and rewritten (a cold read). It holds no secret; losing it costs one cold read"},
	{Key: "fleet.full_every", Flag: "fleet-full-every", Default: "15m", Groups: groupFleet,
		Help: "how often lifeboat fleet serve lists every store in full; the refreshes between list each cluster's agents/ area and, in full, only the clusters whose agents finished a job or captured, that have no status document, are new or were drilled by the hub (0: every refresh)",
		Doc:  "a change no agent reports in its status document (a manual delete, `lifeboat snapshot` without an agent, damage to an object) shows within it; a full listing costs about 60 µs an object. See [fleet.md](fleet.md#cost-what-changed-not-the-fleets-history)"},
	{Key: "fleet.drills.enabled", Flag: "fleet-drills", Default: "false", Groups: groupFleet,
		Help: "lifeboat fleet serve drills every cluster itself (its newest backup; where capture runs, also a point-in-time replay to a later backup) and stores the reports as the clusters' own",
		Doc:  "needs write access to <cluster>/drills/ only (s3:PutObject on prefix/*/drills/*); every other write is refused in code. Uses drill.scratch_dir, drill.etcd_binary and drill.timeout. See [fleet.md](fleet.md#drills-off-the-control-plane)"},
	{Key: "fleet.drills.schedule", Flag: "fleet-drill-schedule", Groups: groupFleet,
		Help: "cron schedule of the hub's drill of every cluster; empty: each cluster's own drill schedule (from its agent's status document)",
		Doc:  "a cluster never drilled is drilled at once; one whose agent states no drill schedule is drilled only with this set"},
	{Key: "fleet.drills.concurrency", Flag: "fleet-drill-concurrency", Default: "1", Groups: groupFleet,
		Help: "drills the hub runs at once (each needs scratch space for its backup's database twice over)"},
	{Key: "fleet.drills.identities", Flag: "fleet-drill-identities", Groups: groupFleet,
		Help: "age identities for the hub's drills of encrypted backups: one identity file for every cluster, or a directory holding a file per cluster named as the cluster",
		Doc:  "keep it 0600 (a directory 0700); a cluster without its file in the directory is drilled without identities (its encrypted backups cannot run to a verdict)"},

	{Key: "scrub.schedule", Flag: "scrub-schedule", Groups: groupScrub,
		Help: "cron schedule of the agent's scrub of the primary and every copy (empty disables), e.g. @daily"},
	{Key: "scrub.read_data", Flag: "read-data", Default: "5%", Groups: groupScrub,
		Help: "the least share of the stored bytes each scrub reads in full, e.g. 5%",
		Doc:  "each run also reads whatever is due (see scrub.cycle) and at least the cycle's share for the time since the previous run"},
	{Key: "scrub.cycle", Flag: "scrub-cycle", Default: "30d", Groups: groupScrub,
		Help: "every retained object is read in full at least once in this time"},

	{Key: "kubernetes.objects.enabled", Flag: "kubernetes-objects", Default: "false", Groups: groupKubernetes,
		Help: "keep an EtcdBackup object per retained backup and the cluster's EtcdRecoverability object in the Kubernetes API after every job (the CRDs must be installed)",
		Doc:  "a failure to reach the API is logged and counted in `lifeboat_kubernetes_sync_failures_total`, never a failed backup; the next job's sync catches up"},
	{Key: "kubernetes.kubeconfig", Flag: "kubeconfig", Groups: groupKubernetes,
		Help: "kubeconfig file of the Kubernetes API (empty: the pod's service account)"},
	{Key: "kubernetes.namespace", Flag: "kubernetes-namespace", Groups: groupKubernetes,
		Help: "namespace of the EtcdBackup objects and their events (empty: the pod's namespace, from POD_NAMESPACE or the service account)"},
}

// section is the group the option is listed under.
func (d *optionDef) section() group { return d.Groups & -d.Groups }

// envNames are the environment variables of the option, first wins.
func (d *optionDef) envNames() []string { return append([]string{envName(d.Key)}, d.Env...) }

// envName is the LIFEBOAT_* variable for a key.
func envName(key string) string {
	return "LIFEBOAT_" + strings.ToUpper(strings.NewReplacer(".", "_", "-", "_").Replace(key))
}

var (
	durationType     = reflect.TypeOf(Duration(0))
	timeDurationType = reflect.TypeOf(time.Duration(0))
	secretType       = reflect.TypeOf(snapshot.Secret(""))
	secretsType      = reflect.TypeOf([]snapshot.Secret(nil))
	percentType      = reflect.TypeOf(Percent(0))
)

// typeName is how help and docs name a field's type: string, strings,
// int, size (bytes, 8MiB), duration (30s, 1d), bool.
func typeName(t reflect.Type) string {
	switch {
	case t == durationType || t == timeDurationType:
		return "duration"
	case t == percentType:
		return "percent"
	case t.Kind() == reflect.Int64:
		return "size"
	case t == reflect.TypeOf([]CopyConfig(nil)):
		return "stores"
	case t.Kind() == reflect.Slice:
		return "strings"
	}
	return t.Kind().String()
}

// isSecret reports whether a field's type redacts it (snapshot.Secret).
func isSecret(t reflect.Type) bool { return t == secretType || t == secretsType }

// option is one key of a Config, bound to its field.
type option struct {
	*optionDef
	key   string
	field reflect.Value
}

// options binds every key of the table to its field in c, in table order.
func options(c *Config) []option {
	out := make([]option, len(optionTable))
	for i := range optionTable {
		d := &optionTable[i]
		out[i] = option{optionDef: d, key: d.Key, field: fieldByKey(reflect.ValueOf(c).Elem(), d.Key)}
	}
	return out
}

// fieldByKey finds the field a YAML key path names; the zero Value when
// none does (a test keeps the table and Config in step).
func fieldByKey(v reflect.Value, key string) reflect.Value {
	for _, name := range strings.Split(key, ".") {
		if v.Kind() != reflect.Struct {
			return reflect.Value{}
		}
		found := false
		for i := 0; i < v.NumField(); i++ {
			if yamlName(v.Type().Field(i)) == name {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}
		}
	}
	return v
}

func yamlName(f reflect.StructField) string {
	if tag, ok := f.Tag.Lookup("yaml"); ok {
		if n := strings.Split(tag, ",")[0]; n != "" {
			return n
		}
	}
	return strings.ToLower(f.Name)
}

// set parses s, in the environment's and flags' syntax, into the field.
func (o option) set(s string) error {
	f := o.field
	switch f.Interface().(type) {
	case Duration:
		d, err := retention.ParseDuration(s)
		if err != nil {
			return cfgErr(o.key, "%s", notA(f.Type(), s))
		}
		f.SetInt(int64(d))
		return nil
	case Percent:
		p, err := scrub.ParsePercent(s)
		if err != nil {
			return cfgErr(o.key, "%v", err)
		}
		f.SetFloat(p)
		return nil
	case time.Duration:
		d, err := retention.ParseDuration(s)
		if err != nil {
			return cfgErr(o.key, "%s", notA(f.Type(), s))
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
	case []CopyConfig:
		f.Set(reflect.ValueOf(parseCopies(s)))
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
			return cfgErr(o.key, "%s", notA(f.Type(), s))
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, err := parseSize(s)
		if err != nil || (f.Kind() == reflect.Int && !isWhole(s)) {
			return cfgErr(o.key, "%s", notA(f.Type(), s))
		}
		f.SetInt(n)
	default:
		return cfgErr(o.key, "cannot be set from text")
	}
	return nil
}

// check parses s as set does, into a scratch value: a flag's value is
// refused as it is given (exit 2, naming the flag).
func (o option) check(s string) error {
	scratch := o
	scratch.field = reflect.New(o.field.Type()).Elem()
	if err := scratch.set(s); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			return ce.Err // pflag names the flag
		}
		return err
	}
	return nil
}

// Duration is a time.Duration that also accepts days, weeks and years
// ("30d", "2w", "1y") in the file, environment and flags.
type Duration time.Duration

// UnmarshalYAML implements yaml.Unmarshaler.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := retention.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("%s", notA(durationType, n.Value))
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// Percent is a share from 0 to 100, written 5% or 5 (scrub.read_data).
type Percent float64

// UnmarshalYAML implements yaml.Unmarshaler.
func (p *Percent) UnmarshalYAML(n *yaml.Node) error {
	v, err := scrub.ParsePercent(n.Value)
	if err != nil {
		return err
	}
	*p = Percent(v)
	return nil
}

// MarshalYAML implements yaml.Marshaler.
func (p Percent) MarshalYAML() (any, error) {
	return strconv.FormatFloat(float64(p), 'g', -1, 64) + "%", nil
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

// sizeUnits are the binary units a size takes: 8MiB, or 8M for short.
var sizeUnits = []struct {
	suf string
	m   int64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}}

// parseSize is the one parser of sizes: an integer with an optional binary
// unit (8MiB, 8 MiB, 8M); an overflow is an error.
func parseSize(s string) (int64, error) {
	mult := int64(1)
	for _, u := range sizeUnits {
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

// optionFlag is the flag of an option: it keeps what was given, in the
// environment's syntax, for LoadConfig to parse with the same parsers as
// the file and the environment (so that flags win over both). Its Type is
// the option's type (--keep-last int, --timeout duration,
// --s3-part-size size).
type optionFlag struct {
	typ   string
	list  bool // repeatable: each use adds
	vals  []string
	check func(string) error // the option's parser, on a scratch value
}

func (f *optionFlag) String() string { return strings.Join(f.vals, ",") }
func (f *optionFlag) Type() string   { return f.typ }
func (f *optionFlag) Set(s string) error {
	if err := f.check(s); err != nil {
		return err
	}
	if f.list {
		f.vals = append(f.vals, s)
	} else {
		f.vals = []string{s}
	}
	return nil
}

// boundFlag is a registered option flag and its key.
type boundFlag struct {
	key  string
	flag *pflag.Flag
}

// addOptionFlags gives fs the flags of the options in groups (and hidden
// ones of the options in hidden), and records them in a so that config
// reads the ones given.
func (a *app) addOptionFlags(fs *pflag.FlagSet, groups, hidden group, hiddenKeys ...string) {
	var c Config
	for _, o := range options(&c) {
		if o.Groups&(groups|hidden) == 0 && !slices.Contains(hiddenKeys, o.key) {
			continue
		}
		t := o.field.Type()
		v := &optionFlag{typ: typeName(t), list: t.Kind() == reflect.Slice, check: o.check}
		f := &pflag.Flag{Name: o.Flag, Usage: o.Help, Value: v, DefValue: o.Default}
		if t.Kind() == reflect.Bool {
			f.NoOptDefVal = "true"
			if f.DefValue == "" {
				f.DefValue = "false"
			}
		}
		f.Hidden = !groups.shows(o.Groups)
		fs.AddFlag(f)
		a.optFlags = append(a.optFlags, boundFlag{key: o.key, flag: f})
	}
}

// withOptions gives c the flags of its option groups (commandGroups) and
// a usage that lists them by group.
func (a *app) withOptions(c *cobra.Command, groups group) *cobra.Command {
	a.addOptionFlags(c.Flags(), groups&^groupGlobal, sharedGroups&^groups, commandKeys[c.Name()]...) // global ones are the root's

	c.SetUsageTemplate(groupedUsageTemplate)
	return c
}

// givenFlags are the option flags given on the command line, by key.
func (a *app) givenFlags() map[string]string {
	set := map[string]string{}
	for _, b := range a.optFlags {
		if b.flag.Changed {
			set[b.key] = b.flag.Value.String()
		}
	}
	return set
}

// flagsByGroup renders the flags of fs in their option groups, then the
// command's own.
func flagsByGroup(fs *pflag.FlagSet) string {
	section := map[string]group{}
	for i := range optionTable {
		section[optionTable[i].Flag] = optionTable[i].section()
	}
	var b strings.Builder
	write := func(title string, keep func(*pflag.Flag) bool) {
		sub := pflag.NewFlagSet(title, pflag.ContinueOnError)
		fs.VisitAll(func(f *pflag.Flag) {
			if keep(f) {
				sub.AddFlag(f)
			}
		})
		if sub.HasAvailableFlags() {
			fmt.Fprintf(&b, "\n%s flags:\n%s", title, sub.FlagUsages())
		}
	}
	write("Command", func(f *pflag.Flag) bool { return section[f.Name] == 0 })
	for _, g := range groupNames {
		write(g.title, func(f *pflag.Flag) bool { return section[f.Name] == g.g })
	}
	return b.String()
}

func init() { cobra.AddTemplateFunc("flagsByGroup", flagsByGroup) }

// withoutConfig is for a command that reads no configuration (version,
// keygen): its help lists its own flags only, not the root's --config
// and --log-* (still accepted, and ignored).
func withoutConfig(c *cobra.Command) *cobra.Command {
	c.SetUsageTemplate(localUsageTemplate)
	return c
}

// localUsageTemplate is groupedUsageTemplate without the inherited flags.
var localUsageTemplate = strings.Replace(groupedUsageTemplate, globalFlagsBlock, "", 1)

const globalFlagsBlock = `{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}`

// groupedUsageTemplate is cobra's usage template with the flags listed by
// option group.
const groupedUsageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]{{end}}{{if gt (len .Aliases) 0}}

Aliases:
  {{.NameAndAliases}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Available Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}
{{flagsByGroup .LocalFlags | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableInheritedFlags}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasHelpSubCommands}}

Additional help topics:{{range .Commands}}{{if .IsAdditionalHelpTopicCommand}}
  {{rpad .CommandPath .CommandPathPadding}} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} [command] --help" for more information about a command.{{end}}
`
