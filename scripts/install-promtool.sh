#!/usr/bin/env bash
# Puts promtool at .bin/promtool: a copy of the one on PATH, or extracted
# from Debian's prometheus package (apt-get download: no service is
# installed or started). make test needs it before the Go tests (the agent's
# metrics are linted with `promtool check metrics`) and for deploy/check.sh.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.bin/promtool
mkdir -p "$root/.bin"
if [ -x "$dest" ] && [ -z "${FORCE:-}" ]; then
	exit 0
fi
if [ -z "${FORCE:-}" ] && found=$(command -v promtool) && [ "$found" != "$dest" ]; then
	install -m 0755 "$found" "$dest"
	exit 0
fi
echo "promtool missing: extracting it from Debian's prometheus package into .bin/"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
apt-get update -qq
(cd "$tmp" && apt-get download -qq prometheus)
dpkg-deb -x "$tmp"/prometheus_*.deb "$tmp/x"
install -m 0755 "$tmp/x/usr/bin/promtool" "$dest"
v=$("$dest" --version 2>&1)
printf '%s\n' "${v%%$'\n'*}"
