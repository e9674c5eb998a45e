#!/usr/bin/env bash
# install-chromium.sh: Debian's chromium, the headless browser that opens
# the fleet hub's status page in the tests (fleet's TestStatusPageInChromium:
# chromium --headless --dump-dom and --screenshot, no Go module). Returns at
# once when it is installed. Without root it installs nothing and says so
# (the test then skips), unless CI=true: then it fails, as the test would.
# After install-node-packages.sh in make's tools: both run apt-get, which
# takes a lock.
set -euo pipefail
bin=/usr/bin/chromium
if [ -x "$bin" ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "$0: chromium missing and not root: not installed (the status page's browser test skips; run as root)" >&2
	if [ "${CI:-}" = true ]; then
		exit 2
	fi
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
if [ ! -x "$bin" ]; then
	echo "$0: $bin still missing after installing chromium" >&2
	exit 1
fi
