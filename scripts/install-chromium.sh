#!/usr/bin/env bash
# install-chromium.sh: Debian's chromium, the headless browser that opens
# the fleet hub's status page in the tests (fleet's TestStatusPageInChromium:
# chromium --headless --dump-dom and --screenshot, no Go module), and a
# font for its text. install-debian.sh installs what is missing (root
# only; under CI=true missing root fails). After install-node-packages.sh
# in make's tools: both run apt-get, which takes a lock.
set -euo pipefail
exec "$(dirname "$0")/install-debian.sh" "the status page's browser test" \
	chromium:/usr/bin/chromium \
	fonts-dejavu-core:/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf
