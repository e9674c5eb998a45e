#!/usr/bin/env bash
# Prints prometheusrule.yaml: the rules of alerts.yaml (from its "groups:"
# line on, comments included) wrapped in a PrometheusRule for the Prometheus
# Operator. Regenerate after changing alerts.yaml:
#   ./prometheusrule.sh > prometheusrule.yaml
# check.sh fails when the file and this output differ.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cat <<'HEADER'
# Generated from alerts.yaml by prometheusrule.sh: do not edit by hand.
# The Prometheus Operator loads it when its ruleSelector matches these
# labels; kube-prometheus-stack selects release: <its release name> by
# default, so add that label in your overlay if needed.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: lifeboat
  labels:
    app.kubernetes.io/name: lifeboat
    app.kubernetes.io/component: alerting
spec:
HEADER
awk 'found || /^groups:/ { found = 1; if ($0 == "") print ""; else print "  " $0 }' "$here/alerts.yaml"
