#!/usr/bin/env bash
# install-debian.sh WHO PACKAGE:FILE...: installs from Debian each PACKAGE
# whose FILE is missing, for WHO (the tests that need them, named in the
# message when they cannot be installed). Installs only what is missing,
# so a second run returns at once; `apt-get update` runs once, before the
# first install. Without root it installs nothing and says so (the tests
# then skip), unless CI=true: then it fails, as the tests would. The
# scripts that name the packages (install-node-packages.sh,
# install-chromium.sh) call it; apt-get takes a lock, so make runs them
# one after the other.
set -euo pipefail
if [ $# -lt 2 ]; then
	echo "usage: $0 WHO PACKAGE:FILE..." >&2
	exit 2
fi
who=$1
shift
missing=()
for w in "$@"; do
	if [ ! -e "${w#*:}" ]; then
		missing+=("${w%%:*}")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "$0: ${missing[*]} missing and not root: not installed ($who skip; run as root)" >&2
	if [ "${CI:-}" = true ]; then
		exit 2
	fi
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for w in "$@"; do
	if [ ! -e "${w#*:}" ]; then
		echo "$0: ${w#*:} still missing after installing ${w%%:*}" >&2
		exit 1
	fi
done
