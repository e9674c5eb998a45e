#!/usr/bin/env bash
# Checks the systemd units in this directory:
#   - systemd-analyze verify on every unit: any message (unknown key, bad
#     value, missing ExecStart binary, broken timer) fails the check;
#   - systemd-analyze security --offline on every service: prints the
#     exposure score and fails above MAX_EXPOSURE (default 2.0, "OK").
# Installs Debian's systemd package when systemd-analyze is missing.
# ExecStart names /usr/local/bin/lifeboat; verify needs an executable there,
# so the units are checked as temporary copies pointing at LIFEBOAT_BIN (or
# .bin/lifeboat from make build, or /bin/true when neither exists).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
max_exposure=${MAX_EXPOSURE:-2.0}

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "systemd-analyze missing: installing Debian's systemd package"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends systemd >/dev/null
fi
# --offline needs systemd 252 or newer.
sd_version=$(systemd-analyze --version | awk 'NR == 1 { print $2 }')
if [ "${sd_version%%[!0-9]*}" -lt 252 ]; then
	echo "systemd $sd_version is too old: systemd-analyze security --offline needs 252" >&2
	exit 1
fi

bin=${LIFEBOAT_BIN:-$root/.bin/lifeboat}
if [ ! -x "$bin" ]; then
	bin=$(type -P true)
	echo "note: no lifeboat binary (make build); verifying with ExecStart=$bin"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
units=()
for f in "$here"/*.service "$here"/*.timer; do
	name=$(basename "$f")
	sed "s#/usr/local/bin/lifeboat#$bin#g" "$f" >"$tmp/$name"
	units+=("$tmp/$name")
done
# Each service with the kit's drop-in (lifeboat-kit.conf) applied, as
# systemd merges it: its [Service] lines after the unit's own (a unit named
# <service>-kit.service). The drop-in must keep the score under the limit too.
for f in "$here"/*.service; do
	name=$(basename "$f" .service)-kit.service
	{ sed "s#/usr/local/bin/lifeboat#$bin#g" "$f"; echo; sed -n '/^\[Service\]/,$p' "$here/lifeboat-kit.conf"; } >"$tmp/$name"
	units+=("$tmp/$name")
done

fail=0
# verify exits 0 even for unknown keys and unparsable values: any output
# is a failure. SYSTEMD_LOG_LEVEL keeps it to warnings and errors.
out=$(cd "$tmp" && SYSTEMD_LOG_LEVEL=warning systemd-analyze verify "${units[@]}" 2>&1) || fail=1
if [ -n "$out" ]; then
	echo "$out"
	fail=1
fi
if [ "$fail" -ne 0 ]; then
	echo "FAIL systemd-analyze verify"
else
	echo "ok   systemd-analyze verify ${units[*]##*/}"
fi

# verify does not notice a timer whose unit is missing: check by name.
for t in "$here"/*.timer; do
	target=$(awk -F= '/^Unit=/ { print $2 }' "$t")
	target=${target:-$(basename "$t" .timer).service}
	if [ ! -f "$here/$target" ]; then
		echo "FAIL $(basename "$t"): triggers $target, which is not in $here"
		fail=1
	fi
done

threshold=$(awk -v m="$max_exposure" 'BEGIN { printf "%d", m * 10 }')
for u in "$tmp"/*.service; do
	name=$(basename "$u")
	rc=0
	report=$(systemd-analyze security --offline=true --threshold="$threshold" "$u" 2>&1) || rc=$?
	overall=$(grep -F 'Overall exposure level' <<<"$report" || true)
	if [ -z "$overall" ]; then
		echo "$report"
		echo "FAIL systemd-analyze security $name: no score"
		fail=1
		continue
	fi
	score=$(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+\.[0-9]+$/) { print $i; exit } }' <<<"$overall")
	if [ "$rc" -ne 0 ]; then
		grep -F '✗' <<<"$report" || true
		echo "FAIL $name exposure $score > $max_exposure"
		fail=1
	else
		echo "ok   $name exposure $score (max $max_exposure): ${overall#*: }"
	fi
done
exit "$fail"
