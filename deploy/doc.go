// Package deploy holds lifeboat's deployment files and the tests that keep
// them honest. It has no Go API: the files are plain text for operators.
//
//	systemd/     lifeboat.service (Type=notify, hardened), lifeboat-once.service
//	             and lifeboat-once.timer (textfile metrics), config.yaml,
//	             lifeboat.env, lifeboat.sysusers; check.sh runs systemd-analyze
//	kubernetes/  kustomize base and overlays (CronJobs with a Pushgateway, or
//	             a Deployment with a ServiceMonitor), Secret templates;
//	             check.sh runs the strict decoding tests of kubernetes/validate,
//	             a Go module of its own so that k8s.io and kustomize stay out
//	             of lifeboat's go.mod
//	prometheus/  alerts.yaml with promtool unit tests, the same rules as a
//	             PrometheusRule, the runbook; check.sh runs promtool
//	grafana/     lifeboat.json, the dashboard
//	helm/        the Helm chart lifeboat/ (files/ holds copies of alerts.yaml and
//	             the dashboard; values.schema.json is generated from
//	             schema.base.json and the option table: go test ./deploy -run
//	             TestChartGenerated -update)
//
// check.sh runs the three checks. The Go tests of this package check what
// ties the files to the code: the example configurations pass
// `lifeboat config check`, the alert rules and the dashboard select only
// metrics and labels that `lifeboat agent --once` really exports, every
// alert has promtool cases that make it fire and keep it silent, the
// PrometheusRule carries exactly alerts.yaml's rules, and the systemd units
// hand the service the credential files its config.yaml names. The docs
// tests check that the links between README.md, docs/ and the deploy pages
// resolve (files and #anchors) and that docs/agent.md lists exactly the
// exported metrics. The helm tests lint and render the chart, create what
// it renders on a real kube-apiserver (strict fields, enforced Pod
// Security) and install and upgrade it; the image tests read the OCI image
// of make image back, run it, rebuild it for the same digest, push it to a
// loopback registry and hold the Dockerfile to the same files.
package deploy
