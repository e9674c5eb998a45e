#!/usr/bin/env bash
# Checks the alert rules: promtool check rules, promtool test rules (each
# alert fires when it should and stays silent when it should not), and that
# prometheusrule.yaml is exactly what prometheusrule.sh makes of alerts.yaml.
# promtool comes from PATH, or .bin/promtool, or is extracted into .bin/
# from Debian's prometheus package (apt-get download: no service is
# installed or started).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

promtool=$(command -v promtool || true)
if [ -z "$promtool" ] && [ -x "$root/.bin/promtool" ]; then
	promtool=$root/.bin/promtool
fi
if [ -z "$promtool" ]; then
	echo "promtool missing: extracting it from Debian's prometheus package into .bin/"
	tmp=$(mktemp -d)
	trap 'rm -rf "$tmp"' EXIT
	apt-get update -qq
	(cd "$tmp" && apt-get download -qq prometheus 2>/dev/null)
	dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
	mkdir -p "$root/.bin"
	install -m 0755 "$tmp/x/usr/bin/promtool" "$root/.bin/promtool"
	promtool=$root/.bin/promtool
fi
"$promtool" --version 2>&1 | head -1

cd "$here"
"$promtool" check rules alerts.yaml
"$promtool" test rules alerts_test.yaml alerts_long_test.yaml

if ! diff -u prometheusrule.yaml <(./prometheusrule.sh); then
	echo "FAIL prometheusrule.yaml is out of date: ./prometheusrule.sh > prometheusrule.yaml"
	exit 1
fi
echo "ok   prometheusrule.yaml matches alerts.yaml"
