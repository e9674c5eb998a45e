#!/usr/bin/env bash
# install-prometheus.sh OUTDIR: puts Debian's Prometheus server and promtool
# at OUTDIR/prometheus and OUTDIR/promtool, both extracted from the same
# prometheus package (apt-get download: nothing is installed as a service
# or started). promtool lints the agent's metrics in the Go tests and
# checks the alert rules (deploy/prometheus/check.sh); the server is the
# real Prometheus of the fleet's alert test (deploy/fleet_prometheus_test.go).
# Returns at once when both are there (FORCE=1 extracts them again).
#
# Why Debian's and not a build: building both from the module proxy
# (github.com/prometheus/prometheus, even with -tags remove_all_sd) cost
# 6 min 16 s of CPU on a cold machine (docs/testing.md), a tenth of a cold
# CI run's budget, for tests that Debian's 2.42 passes as well; the
# package is one download.
set -euo pipefail
if [ $# -ne 1 ]; then
	echo "usage: $0 OUTDIR (e.g. $0 .bin)" >&2
	exit 2
fi
out=$1
mkdir -p "$out"
if [ -x "$out/prometheus" ] && [ -x "$out/promtool" ] && [ -z "${FORCE:-}" ]; then
	exit 0
fi
echo "prometheus or promtool missing: extracting both from Debian's prometheus package into $out/"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! (cd "$tmp" && apt-get download -qq prometheus 2>/dev/null); then
	apt-get update -qq
	(cd "$tmp" && apt-get download -qq prometheus)
fi
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
for c in prometheus promtool; do
	install -m 0755 "$tmp/x/usr/bin/$c" "$out/$c.tmp"
	mv "$out/$c.tmp" "$out/$c"
	v=$("$out/$c" --version 2>&1)
	printf '%s\n' "${v%%$'\n'*}"
done
