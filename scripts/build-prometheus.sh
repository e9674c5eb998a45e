#!/usr/bin/env bash
# build-prometheus.sh VERSION OUTDIR: builds the Prometheus server and
# promtool of github.com/prometheus/prometheus at VERSION (the module's
# tag, e.g. v0.316.0 for Prometheus 3.16.0) into OUTDIR/prometheus and
# OUTDIR/promtool. promtool lints the agent's metrics and tests the alert
# rules; the server is the real Prometheus of the fleet's alert test
# (deploy/fleet_prometheus_test.go: it scrapes a real hub with the fleet
# rules loaded). Both are commands of the same module, so they come from
# one throwaway module under .bin/src/prometheus-VERSION in ONE go build
# (the packages they share compile once), with -tags remove_all_sd:
# Prometheus's build tag that leaves out every service-discovery plugin
# (Kubernetes, the clouds, Consul, ...; static, file and HTTP discovery
# stay), about a third of the server's packages (docs/testing.md has the
# figures). The version is stamped as Prometheus's own build does
# (github.com/prometheus/common/version), so a binary that already reports
# it is not built again: a second run returns at once. The web UI's assets
# are not embedded (the tests use the API only).
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 VERSION OUTDIR (e.g. $0 v0.316.0 .bin)" >&2
	exit 2
fi
version=$1
out=$2
case $version in
v0.[0-9]*.[0-9]*) ;;
*)
	echo "$0: version $version: want v0.MAJORMINOR.PATCH (the module's tag, e.g. v0.316.0 for Prometheus 3.16.0)" >&2
	exit 2
	;;
esac
. "$(dirname "$0")/build-lib.sh"
outdir=$out
# v0.316.0 -> 3.16.0
mm=${version#v0.}
patch=${mm#*.}
mm=${mm%%.*}
semver=${mm:0:1}.$((10#${mm:1})).$patch
cmds="prometheus promtool"

# reported CMD: true when OUTDIR/CMD reports the version.
reported() {
	case $(firstline "$outdir/$1") in
	"$1, version $semver "*) return 0 ;;
	esac
	return 1
}

missing=()
for c in $cmds; do
	if ! reported "$c"; then
		missing+=("$c")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0 # built already
fi
src=$srcroot/prometheus-$version
mkdir -p "$src" "$outdir"
cd "$src"
if [ ! -f tidy.done ]; then # go.sum alone may be left by a failed run
	{
		printf 'module lifeboat.local/prometheus-%s\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus %s\n\n' "$version" "$version"
		for c in $cmds; do
			printf 'tool github.com/prometheus/prometheus/cmd/%s\n' "$c"
		done
	} >go.mod
	"$go" mod tidy
	touch tidy.done
fi
v=github.com/prometheus/common/version
ldflags="-s -w -X $v.Version=$semver -X $v.Revision=$version -X $v.Branch=module -X $v.BuildUser=lifeboat"
pkgs=()
for c in "${missing[@]}"; do
	pkgs+=("github.com/prometheus/prometheus/cmd/$c")
done
tmp=$outdir/.prometheus-build.$$
rm -rf "$tmp"
mkdir "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "building ${missing[*]} of Prometheus $semver ($version, -tags remove_all_sd)" >&2
CGO_ENABLED=0 "$go" build -trimpath -tags remove_all_sd -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
for c in "${missing[@]}"; do
	mv "$tmp/$c" "$outdir/$c"
	if ! reported "$c"; then
		echo "$0: $outdir/$c does not report $semver after the build: $(firstline "$outdir/$c")" >&2
		exit 1
	fi
done
