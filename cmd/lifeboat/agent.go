package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/lifeboat-dev/lifeboat/agent"
	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/capture"
	"github.com/lifeboat-dev/lifeboat/kubeobjects"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/restore/drill"
	"github.com/lifeboat-dev/lifeboat/retention/prune"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

type agentOptions struct {
	once bool
}

func newAgentCmd(a *app) *cobra.Command {
	var o agentOptions
	c := &cobra.Command{
		Use:   "agent",
		Short: "Run the daemon: scheduled snapshot, prune and drill, /metrics, /healthz, /readyz, /status",
		Long: `Run lifeboat as a daemon driven by the configuration: cron schedules
(schedule.snapshot, schedule.prune, schedule.drill; an empty schedule
disables a job), a leader lock in etcd so that several agents of one
cluster run each job once (agent.lock), webhooks (notify.*), and HTTP on
agent.listen with /metrics, /healthz, /readyz and /status. SIGTERM or
SIGINT stops it: running jobs are cancelled and cleaned up, the lock is
released, and it exits 0 within agent.shutdown_timeout. Under systemd
(Type=notify) it reports READY=1, STOPPING=1 and the watchdog.

With capture.enabled (--capture) it also captures every change between
snapshots for point-in-time restore, continuously, while it holds the lock.

With --once it runs one cycle instead (snapshot, prune, drill, each when
scheduled; capture.enabled is refused: it needs the daemon), exits 0 when all passed and 1 otherwise, and writes its
metrics to agent.textfile (--textfile, for node_exporter) and/or pushes
them to agent.pushgateway (--pushgateway): for Kubernetes CronJobs and
systemd timers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := a.uploadConfig()
			if err != nil {
				return err
			}
			return runAgent(cmd.Context(), cfg, a.logger(cfg), o, a.getenv)
		},
	}
	c.Flags().BoolVar(&o.once, "once", false, "run one cycle (snapshot, prune, drill as scheduled) and exit 0 or 1")
	return c
}

// runAgent builds the agent from cfg and runs it until ctx ends, or one
// cycle with o.once.
func runAgent(ctx context.Context, cfg *Config, lg *slog.Logger, o agentOptions, getenv func(string) string) error {
	acfg, err := agentConfig(ctx, cfg, lg, o, getenv)
	if err != nil {
		return err
	}
	ag, err := agent.New(acfg, lg)
	if err != nil {
		return err
	}
	if !o.once {
		return ag.Run(ctx)
	}
	err = ag.RunOnce(ctx)
	// The metrics go out whatever the outcome: a failed run is what they
	// must show.
	if cfg.Agent.Textfile != "" {
		if werr := agent.WriteTextfile(cfg.Agent.Textfile, ag.Registry()); werr != nil {
			err = errors.Join(err, werr)
		}
	}
	if cfg.Agent.Pushgateway != "" {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		perr := agent.Push(pctx, cfg.Agent.Pushgateway.Reveal(), cfg.Cluster, pushInstance(cfg), ag.Registry(), nil)
		cancel()
		if perr != nil {
			err = errors.Join(err, perr)
		}
	}
	if err != nil {
		return fmt.Errorf("agent --once: %w", err)
	}
	return nil
}

// agentConfig turns the configuration into the agent's: the checks that
// need the command line, the store and its encoding, the jobs, the leader
// lock, and how the agent serves (once, or as the daemon).
func agentConfig(ctx context.Context, cfg *Config, lg *slog.Logger, o agentOptions, getenv func(string) string) (agent.Config, error) {
	var none agent.Config
	if cfg.Capture.Enabled && o.once {
		return none, &ConfigError{Key: "capture.enabled", Err: errors.New("agent --once cannot capture: capture runs continuously in the daemon " +
			"(lifeboat agent without --once: lifeboat.service, or the Kubernetes Deployment overlay); leave capture off for CronJobs and timers")}
	}
	pruning := cfg.Schedule.Prune != ""
	policy, err := cfg.Retention.Policy()
	if err != nil && pruning {
		return none, &ConfigError{Key: "retention", Err: fmt.Errorf("%w (schedule.prune is %q: set retention.keep_* or an empty schedule.prune)", errors.Unwrap(err), cfg.Schedule.Prune)}
	}
	enc, ids, err := agentEncoding(cfg, lg)
	if err != nil {
		return none, err
	}
	backups, err := createBackups(ctx, cfg, lg)
	if err != nil {
		return none, err
	}
	host, _ := os.Hostname()
	identity := host + "/" + strconv.Itoa(os.Getpid())

	acfg := agentSchedules(cfg, backups, enc, identity)
	if cfg.Capture.Enabled {
		acfg.Capture = captureFunc(cfg, backups, enc, ids, lg)
		acfg.CaptureInterval = cfg.Capture.Interval
	}
	if pruning {
		acfg.Prune = &prune.Job{Backups: backups, Policy: policy, OrphanGrace: time.Duration(cfg.Retention.OrphanGrace)}
	}
	if cfg.Scrub.Schedule != "" {
		acfg.Schedules.Scrub = cfg.Scrub.Schedule
		acfg.Scrub = scrubJob(cfg, backups, ids)
	}
	dj := agentDrillJob(cfg, backups, ids, lg)
	acfg.Drill = func(ctx context.Context) (*drill.Outcome, error) { return drill.RunJob(ctx, dj, lg) }
	if err := agentCopies(ctx, &acfg, cfg, dj, lg); err != nil {
		return none, err
	}
	if cfg.Agent.Lock {
		cc, err := etcdConfig(cfg).ClientConfig()
		if err != nil {
			return none, &ConfigError{Key: "etcd", Err: err}
		}
		acfg.Lock = &agent.LockConfig{Etcd: cc, TTL: cfg.Agent.LockTTL, Identity: identity}
	}
	agentServing(&acfg, cfg, o, getenv, lg)
	acfg.Kube = kubeClient(cfg, identity, getenv, lg)
	return acfg, nil
}

// agentEncoding reads the store's encoding and the identities that decrypt
// it, and logs what is weak about them.
func agentEncoding(cfg *Config, lg *slog.Logger) (repository.Encoding, []age.Identity, error) {
	enc, err := encodingFromConfig(cfg)
	if err != nil {
		return enc, nil, err
	}
	ids, err := identities(cfg)
	if err != nil {
		return enc, nil, err
	}
	for _, w := range encryptionWarnings(enc, ids) {
		lg.Warn("ENCRYPTION WARNING: " + w)
	}
	return enc, ids, nil
}

// agentSchedules is the agent's configuration before its jobs: the
// cluster, the store, the snapshot job, the schedules, the limits and the
// webhooks.
func agentSchedules(cfg *Config, backups *repository.Repo, enc repository.Encoding, identity string) agent.Config {
	s := cfg.Schedule
	return agent.Config{
		Cluster:         cfg.Cluster,
		Backups:         backups,
		Snapshot:        agentSnapshotJob(cfg, backups, enc),
		Schedules:       agent.Schedules{Snapshot: s.Snapshot, Prune: s.Prune, Drill: s.Drill},
		Jitter:          s.Jitter,
		RunAtStart:      s.RunAtStart,
		SnapshotRetries: cfg.Agent.SnapshotRetries,
		SnapshotTimeout: cfg.Snapshot.Timeout,
		StaleAfter:      cfg.Agent.StaleAfter,
		ShutdownTimeout: cfg.Agent.ShutdownTimeout,
		Notify: agent.NotifyConfig{
			Webhooks: cfg.Notify.Webhooks,
			On:       cfg.Notify.On,
			Timeout:  cfg.Notify.Timeout,
		},
		Identity: identity,
		Version:  Version,
	}
}

// agentDrillJob is the scheduled drill of the store. With capture on, each
// drill also proves a point in time against the live cluster
// (drill.Job.Live).
func agentDrillJob(cfg *Config, backups *repository.Repo, ids []age.Identity, lg *slog.Logger) drill.Job {
	dj := drill.Job{
		Backups: backups,
		Target:  cfg.Schedule.DrillTarget,
		Options: drill.Options{
			Identities:    ids,
			ScratchDir:    cfg.Drill.ScratchDir,
			EtcdBinary:    cfg.Drill.EtcdBinary,
			CheckPrefixes: cfg.Drill.CheckPrefixes,
			Timeout:       cfg.Drill.Timeout,
			Version:       Version,
		},
	}
	if cfg.Capture.Enabled {
		ec := etcdConfig(cfg)
		dj.Live = func(ctx context.Context) (drill.LiveCluster, func(), error) {
			sess, err := snapshot.Dial(ctx, ec, lg)
			if err != nil {
				return nil, nil, err
			}
			return drill.SessionLive(sess), func() { sess.Close() }, nil
		}
	}
	return dj
}

// scrubJob is the scrub of the store repo is in, by the scrub.* keys.
func scrubJob(cfg *Config, repo *repository.Repo, ids []age.Identity) *scrub.Job {
	return &scrub.Job{Repo: repo, Identities: ids, ReadData: float64(cfg.Scrub.ReadData), Cycle: time.Duration(cfg.Scrub.Cycle)}
}

// agentServing sets how the agent serves: agent --once has no HTTP and no
// systemd, and its metrics lack the Go and process collectors (see
// agent.NewRegistry); the daemon listens, talks to systemd and serves
// /metrics itself.
func agentServing(acfg *agent.Config, cfg *Config, o agentOptions, getenv func(string) string, lg *slog.Logger) {
	if o.once {
		acfg.Registry = prometheus.NewRegistry()
		return
	}
	acfg.Registry = agent.NewRegistry()
	acfg.Listen = cfg.Agent.Listen
	acfg.Systemd = systemdFromEnv(getenv)
	if cfg.Agent.Textfile != "" || cfg.Agent.Pushgateway != "" {
		lg.Info("agent.textfile and agent.pushgateway apply to agent --once; the daemon serves /metrics")
	}
}

// agentCopies gives the agent its copies: each one's copy job, its own
// prune (when the agent prunes) and a drill of it (written to it).
func agentCopies(ctx context.Context, acfg *agent.Config, cfg *Config, drillJob drill.Job, lg *slog.Logger) error {
	copies, err := openCopies(ctx, cfg, lg)
	if err != nil {
		return err
	}
	acfg.CopyInterval, acfg.DrillStore = cfg.Agent.CopyInterval, cfg.Drill.Store
	for _, cs := range copies {
		c := agent.Copy{Name: cs.cfg.Name, Job: cfg.copyJob(acfg.Backups, cs)}
		if acfg.Prune != nil {
			policy, err := cfg.copyRetention(cs.cfg).Policy()
			if err != nil {
				return &ConfigError{Key: "copies", Err: fmt.Errorf("copy %s: %w", cs.cfg.Name, err)}
			}
			c.Prune = &prune.Job{Backups: cs.repo, Policy: policy, OrphanGrace: time.Duration(cfg.Retention.OrphanGrace)}
		}
		dj := drillJob
		dj.Backups = cs.repo
		dlg := lg.With("store", cs.cfg.Name)
		c.Drill = func(ctx context.Context) (*drill.Outcome, error) { return drill.RunJob(ctx, dj, dlg) }
		if acfg.Scrub != nil {
			c.Scrub = scrubJob(cfg, cs.repo, acfg.Scrub.Identities)
		}
		acfg.Copies = append(acfg.Copies, c)
	}
	return nil
}

// captureFunc returns the agent's capture job: each run dials its own etcd
// session (closed when the run ends, so that a restart after a failure
// starts from fresh connections) and writes to the snapshot job's store
// with the snapshot job's encoding, so that segments are compressed and
// encrypted like the snapshots they continue.
func captureFunc(cfg *Config, backups *repository.Repo, enc repository.Encoding, ids []age.Identity, lg *slog.Logger) agent.CaptureFunc {
	ecfg := etcdConfig(cfg)
	clg := lg.With("job", agent.JobCapture)
	compact, _ := cfg.Capture.compactPolicy() // checked by Validate
	return func(ctx context.Context, h agent.CaptureHooks) error {
		s, err := snapshot.Dial(ctx, ecfg, clg)
		if err != nil {
			return fmt.Errorf("capture: %w", err)
		}
		defer s.Close()
		return capture.Run(ctx, capture.Job{
			Session:         s,
			Repo:            backups,
			Encoding:        enc,
			Interval:        cfg.Capture.Interval,
			MaxSegmentBytes: cfg.Capture.MaxSegmentBytes,
			MaxBufferBytes:  cfg.Capture.MaxBufferBytes,
			SpoolDir:        cfg.Snapshot.SpoolDir,
			Token:           h.Token,
			HoldBytes:       holdBytes(cfg),
			Snapshot:        anchorLimited(h.Snapshot, anchorBuffers(cfg)),
			Report:          h.Report,
			Rollover:        h.Rollover,
			RolloverAfter:   cfg.Capture.Rollover,
			Compact:         compact,
			Identities:      ids,
			Stats:           h.Stats,
		}, clg)
	}
}

// systemdFromEnv reads the service manager's variables: NOTIFY_SOCKET,
// and WATCHDOG_USEC when WATCHDOG_PID is unset or this process.
func systemdFromEnv(getenv func(string) string) agent.Systemd {
	sd := agent.Systemd{Socket: getenv("NOTIFY_SOCKET")}
	if pid := getenv("WATCHDOG_PID"); pid != "" && pid != strconv.Itoa(os.Getpid()) {
		return sd
	}
	if us, err := strconv.ParseInt(getenv("WATCHDOG_USEC"), 10, 64); err == nil && us > 0 {
		sd.Watchdog = time.Duration(us) * time.Microsecond
	}
	return sd
}

// pushInstance names the jobs this configuration runs ("snapshot-prune"),
// the Pushgateway grouping that keeps CronJobs with different jobs apart.
func pushInstance(cfg *Config) string {
	var jobs []string
	for _, j := range []struct{ name, schedule string }{
		{"snapshot", cfg.Schedule.Snapshot}, {"prune", cfg.Schedule.Prune}, {"drill", cfg.Schedule.Drill},
	} {
		if j.schedule != "" {
			jobs = append(jobs, j.name)
		}
	}
	if len(jobs) == 0 {
		return "none"
	}
	return strings.Join(jobs, "-")
}

// agentSnapshotJob is the scheduled snapshot job: snapshotJob, skipping a
// cluster unchanged since its newest backup as agent.skip_unchanged says.
func agentSnapshotJob(cfg *Config, backups *repository.Repo, enc repository.Encoding) *backup.Job {
	j := snapshotJob(cfg, backups, enc)
	j.SkipUnchanged = cfg.Agent.SkipUnchanged
	return j
}

// serviceAccountNamespace is the pod's namespace as its service account
// mount says.
const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// kubeClient is the client of the agent's Kubernetes objects, nil when
// kubernetes.objects.enabled is off. A client that cannot be configured
// is logged and fails every sync (counted), never the agent's backups.
func kubeClient(cfg *Config, identity string, getenv func(string) string, lg *slog.Logger) *kubeobjects.Client {
	k := cfg.Kubernetes
	if !k.Objects.Enabled {
		return nil
	}
	ns := k.Namespace
	if ns == "" {
		ns = getenv("POD_NAMESPACE")
	}
	if ns == "" {
		if b, err := os.ReadFile(serviceAccountNamespace); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	c, err := kubeobjects.New(kubeobjects.Config{Kubeconfig: k.Kubeconfig, Namespace: ns, Cluster: cfg.Cluster, Instance: identity})
	if err != nil {
		lg.Error("kubernetes.objects.enabled: no Kubernetes client; the EtcdBackup objects are not kept (backups go on)", "err", err)
		return kubeobjects.Unusable(err)
	}
	return c
}
