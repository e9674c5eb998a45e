package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// flagKeys maps each configuration flag to its config key. Flags keep
// etcdctl's names for the etcd connection.
var flagKeys = map[string]string{
	"cluster":                "cluster",
	"log-level":              "log.level",
	"log-format":             "log.format",
	"endpoints":              "etcd.endpoints",
	"cacert":                 "etcd.cacert",
	"cert":                   "etcd.cert",
	"key":                    "etcd.key",
	"user":                   "etcd.user",
	"password":               "etcd.password",
	"dial-timeout":           "etcd.dial_timeout",
	"member":                 "etcd.member",
	"spool-dir":              "snapshot.spool_dir",
	"stall-timeout":          "snapshot.stall_timeout",
	"timeout":                "snapshot.timeout",
	"writeback-chunk":        "snapshot.writeback_chunk",
	"live-hashkv":            "snapshot.live_hashkv",
	"store":                  "store.url",
	"compression":            "store.compression",
	"recipient":              "encryption.recipients",
	"recipients-file":        "encryption.recipients_file",
	"identity-file":          "encryption.identity_file",
	"s3-endpoint":            "store.s3.endpoint",
	"s3-region":              "store.s3.region",
	"s3-path-style":          "store.s3.path_style",
	"s3-sse":                 "store.s3.sse",
	"s3-sse-kms-key-id":      "store.s3.sse_kms_key_id",
	"s3-storage-class":       "store.s3.storage_class",
	"s3-part-size":           "store.s3.part_size",
	"s3-concurrency":         "store.s3.concurrency",
	"s3-create-bucket":       "store.s3.create_bucket",
	"s3-profile":             "store.s3.profile",
	"s3-max-attempts":        "store.s3.max_attempts",
	"object-lock-mode":       "store.object_lock.mode",
	"object-lock-retain":     "store.object_lock.retain",
	"object-lock-legal-hold": "store.object_lock.legal_hold",
	"keep-last":              "retention.keep_last",
	"keep-hourly":            "retention.keep_hourly",
	"keep-daily":             "retention.keep_daily",
	"keep-weekly":            "retention.keep_weekly",
	"keep-monthly":           "retention.keep_monthly",
	"keep-yearly":            "retention.keep_yearly",
	"keep-within":            "retention.keep_within",
	"retention-time-zone":    "retention.time_zone",
	"orphan-grace":           "retention.orphan_grace",
	"scratch-dir":            "drill.scratch_dir",
	"etcd-binary":            "drill.etcd_binary",
	"check-prefix":           "drill.check_prefixes",
	"drill-timeout":          "drill.timeout",
	"snapshot-schedule":      "schedule.snapshot",
	"prune-schedule":         "schedule.prune",
	"drill-schedule":         "schedule.drill",
	"jitter":                 "schedule.jitter",
	"run-at-start":           "schedule.run_at_start",
	"drill-target":           "schedule.drill_target",
	"listen":                 "agent.listen",
	"lock":                   "agent.lock",
	"lock-ttl":               "agent.lock_ttl",
	"snapshot-retries":       "agent.snapshot_retries",
	"stale-after":            "agent.stale_after",
	"pushgateway":            "agent.pushgateway",
	"textfile":               "agent.textfile",
	"shutdown-timeout":       "agent.shutdown_timeout",
	"webhook":                "notify.webhooks",
	"notify-on":              "notify.on",
	"notify-timeout":         "notify.timeout",
}

// app carries what every command needs: output streams and the flag set
// that becomes the configuration.
type app struct {
	stdout, stderr io.Writer
	configFile     string
	flags          *pflag.FlagSet
	getenv         func(string) string
}

// config loads the effective configuration (file, env, flags).
func (a *app) config() (*Config, error) {
	set := map[string]string{}
	// VisitAll and Changed: cobra parses the subcommand's merged flag set,
	// so only the shared *Flag knows it was given.
	a.flags.VisitAll(func(f *pflag.Flag) {
		key, ok := flagKeys[f.Name]
		if !ok || !f.Changed {
			return
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			set[key] = strings.Join(sv.GetSlice(), ",")
		} else {
			set[key] = f.Value.String()
		}
	})
	file := a.configFile
	if file == "" {
		file = a.getenv("LIFEBOAT_CONFIG")
	}
	cfg, err := LoadConfig(file, a.getenv, set)
	if err != nil {
		return nil, err
	}
	var buffers int64
	if scheme, loc, _ := parseStoreURL(cfg.Store.URL); scheme == "s3" {
		s3 := cfg.s3Config(loc).WithDefaults()
		buffers = int64(s3.Concurrency+2) * s3.PartSize
	}
	setMemoryLimit(buffers)
	return cfg, nil
}

func (a *app) logger(c *Config) *slog.Logger {
	return newLogger(a.stderr, c.Log.Level, c.Log.Format)
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr, getenv: os.Getenv}
	root := &cobra.Command{
		Use:           "lifeboat",
		Short:         "Verified etcd backups, shipped, retained and restore-drilled",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	pf := root.PersistentFlags()
	a.flags = pf
	pf.StringVar(&a.configFile, "config", "", "YAML config file (also LIFEBOAT_CONFIG)")
	pf.String("cluster", "", "cluster name inside the store (default \"default\")")
	pf.String("log-level", "", "debug, info, warn or error (default info)")
	pf.String("log-format", "", "auto (text on a terminal, else JSON), text or json")
	pf.StringSlice("endpoints", nil, "etcd client URLs (also ETCDCTL_ENDPOINTS)")
	pf.String("cacert", "", "CA bundle for etcd's TLS (also ETCDCTL_CACERT)")
	pf.String("cert", "", "client certificate for etcd (also ETCDCTL_CERT)")
	pf.String("key", "", "client key for etcd (also ETCDCTL_KEY)")
	pf.String("user", "", "etcd user (also ETCDCTL_USER)")
	pf.String("password", "", "etcd password (prefer ETCDCTL_PASSWORD or the config file)")
	pf.String("dial-timeout", "", "timeout to connect to each member (default 5s)")
	pf.String("member", "", "member to snapshot: follower (default), leader, any, or an endpoint URL")
	pf.String("spool-dir", "", "directory for the raw snapshot during verification (default /var/lib/lifeboat/spool)")
	pf.String("stall-timeout", "", "fail when the snapshot stream stalls this long (default 30s)")
	pf.String("timeout", "", "overall backup timeout (default 30m)")
	pf.String("writeback-chunk", "", "bytes written before writeback starts, e.g. 8MiB (0: kernel default)")
	pf.String("live-hashkv", "", "compare HashKV with a live member: always (default; another member when one answers), auto (defer on a single-member cluster) or defer (leave it to the drill)")
	pf.String("store", "", "backup store: file:///path or s3://bucket/prefix (default file:///var/lib/lifeboat/backups)")
	pf.String("compression", "", "zstd (default) or none")
	pf.StringSlice("recipient", nil, "age recipient (age1…) to encrypt backups to; repeatable")
	pf.String("recipients-file", "", "file of age recipients, one per line")
	pf.String("identity-file", "", "age identity file to decrypt backups (restore, drill, verify)")
	pf.String("s3-endpoint", "", "S3-compatible endpoint URL (default: AWS_ENDPOINT_URL_S3 or AWS)")
	pf.String("s3-region", "", "S3 region (default: the AWS SDK chain, then us-east-1)")
	pf.Bool("s3-path-style", false, "path-style bucket addressing (MinIO, Ceph, versitygw)")
	pf.String("s3-sse", "", "server-side encryption: AES256 or aws:kms")
	pf.String("s3-sse-kms-key-id", "", "KMS key id for --s3-sse aws:kms")
	pf.String("s3-storage-class", "", "storage class of new objects (e.g. STANDARD_IA)")
	pf.String("s3-part-size", "", "multipart part size, e.g. 16MiB")
	pf.String("s3-concurrency", "", "parts uploaded at once (default 4)")
	pf.Bool("s3-create-bucket", false, "create the bucket when it does not exist")
	pf.String("s3-profile", "", "AWS shared config profile")
	pf.String("s3-max-attempts", "", "attempts per S3 request, with exponential backoff and jitter (default 8)")
	pf.String("object-lock-mode", "", "S3 Object Lock mode for each data object: GOVERNANCE or COMPLIANCE")
	pf.String("object-lock-retain", "", "Object Lock retention per data object, e.g. 30d")
	pf.Bool("object-lock-legal-hold", false, "put a legal hold on each data object")
	pf.String("keep-last", "", "retention: keep the N newest backups")
	pf.String("keep-hourly", "", "retention: keep the newest backup of each of the last N hours (-1: all)")
	pf.String("keep-daily", "", "retention: … of the last N days")
	pf.String("keep-weekly", "", "retention: … of the last N ISO weeks")
	pf.String("keep-monthly", "", "retention: … of the last N months")
	pf.String("keep-yearly", "", "retention: … of the last N years")
	pf.String("keep-within", "", "retention: keep every backup younger than this, e.g. 7d")
	pf.String("retention-time-zone", "", "time zone of the calendar buckets (default UTC)")
	pf.String("scratch-dir", "", "drill scratch directory (default /var/lib/lifeboat/scratch)")
	pf.String("etcd-binary", "", "run drills with this etcd binary instead of the embedded server")
	pf.StringSlice("check-prefix", nil, "drill: a key prefix that must hold keys after restore (repeatable), e.g. /registry/namespaces/")
	pf.String("drill-timeout", "", "bound of one drill (default 15m)")
	pf.String("snapshot-schedule", "", "agent: cron schedule of snapshots (default @every 1h; empty disables)")
	pf.String("prune-schedule", "", "agent: cron schedule of prune (default none: set it with a retention policy)")
	pf.String("drill-schedule", "", "agent: cron schedule of drills (default @daily)")
	pf.String("jitter", "", "agent: random delay up to this before each run")
	pf.Bool("run-at-start", false, "agent: take a snapshot at start")
	pf.String("drill-target", "", "agent: latest or random")
	pf.String("listen", "", "agent: HTTP address for /metrics /healthz /readyz /status (default 127.0.0.1:9469)")
	pf.Bool("lock", true, "agent: coordinate agents with a lock in etcd")
	pf.String("lock-ttl", "", "agent: lease TTL of the lock (default 30s)")
	pf.String("snapshot-retries", "", "agent: retries of a failed snapshot (default 2)")
	pf.String("stale-after", "", "agent: the newest backup is stale after this (default 3h)")
	pf.String("pushgateway", "", "agent --once: push metrics to this Pushgateway URL")
	pf.String("textfile", "", "agent --once: write metrics to this file for node_exporter")
	pf.String("shutdown-timeout", "", "agent: bound of a graceful shutdown (default 30s)")
	pf.StringArray("webhook", nil, "notification webhook URL (repeatable; a comma inside a URL is kept)")
	pf.StringSlice("notify-on", nil, "events to notify: drill_failed, snapshot_failed, prune_failed, stale")
	pf.String("notify-timeout", "", "timeout of one webhook attempt (default 10s)")
	pf.String("orphan-grace", "", "age before orphaned objects and incomplete uploads are removed (default 24h)")

	root.AddCommand(
		newVersionCmd(a),
		newConfigCmd(a),
		newSnapshotCmd(a),
		newListCmd(a),
		newVerifyCmd(a),
		newDemoCmd(a),
		newPruneCmd(a),
		newRestoreCmd(a),
		newFetchCmd(a),
		newDrillCmd(a),
		newAgentCmd(a),
		newEtcdCmd(a),
	)
	return root
}
