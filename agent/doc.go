// Package agent is lifeboat's daemon: it runs the jobs on their cron
// schedules (with jitter, retries and no overlapping runs), only while it
// holds the cluster's leader lock in etcd when one is configured, and
// reports on them: Prometheus metrics, /metrics /healthz /readyz /status
// over HTTP, webhook notifications, systemd readiness and watchdog, and
// for agent --once the textfile and Pushgateway exports; and into the
// store, a status document (repository.AgentStatus: its schedules,
// stale_after, capture, copies and each job's last run) for readers of
// the store alone, such as lifeboat fleet.
//
// It owns no job. The jobs are the same ones the CLI's one-shot commands
// call: backup.Run (take, verify, encode, store, commit), prune.Run
// (retention/prune: the policy applied to the store, orphans) and
// drill.RunJob (restore/drill: the drill and its report); cmd/lifeboat
// wires them into a Config. agent imports those packages and none of them imports
// agent.
package agent
