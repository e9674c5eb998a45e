#!/usr/bin/env bash
# Checks the alert rules: promtool check rules, promtool test rules (each
# alert fires when it should and stays silent when it should not), and that
# prometheusrule.yaml is exactly what prometheusrule.sh makes of alerts.yaml.
# promtool is .bin/promtool, Debian's, put there by make
# (scripts/install-prometheus.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

make -s -C "$root" .bin/promtool
promtool=$root/.bin/promtool
"$promtool" --version 2>&1 | head -1

cd "$here"
"$promtool" check rules alerts.yaml
"$promtool" test rules alerts_test.yaml alerts_long_test.yaml
"$promtool" check rules fleet/alerts.yaml
(cd fleet && "$promtool" test rules alerts_test.yaml)

if ! diff -u prometheusrule.yaml <(./prometheusrule.sh); then
	echo "FAIL prometheusrule.yaml is out of date: ./prometheusrule.sh > prometheusrule.yaml"
	exit 1
fi
echo "ok   prometheusrule.yaml matches alerts.yaml"
