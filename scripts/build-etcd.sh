#!/usr/bin/env bash
# build-etcd.sh VERSION OUT: builds the etcd server of module version
# VERSION (e.g. v3.5.35) into OUT, for the version tests (verify, restore).
# etcd's modules refuse `go install mod@version` (replace directives), so
# the binary is built from a throwaway module under .bin/src/etcd-VERSION
# that requires go.etcd.io/etcd/server/v3 at VERSION as a tool (the module
# root is the server's main package). go mod tidy picks the dependency
# versions etcd's own go.mod asks for. A cold build takes a few minutes on
# 2 cores; when OUT is that version already, nothing is done.
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 VERSION OUT (e.g. $0 v3.5.35 .bin/etcd-3.5)" >&2
	exit 2
fi
version=$1
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)
go=${GO:-go}
case $out in
/*) ;;
*) out=$root/$out ;;
esac
# firstline BIN: the first line BIN --version prints. The whole output is
# read before it is cut: with pipefail, `BIN --version | head -1` (or
# grep -q) fails with SIGPIPE when the reader exits first
# (scripts/test-scripts.sh).
firstline() {
	local v
	v=$("$1" --version 2>/dev/null) || return 0
	printf '%s\n' "${v%%$'\n'*}"
}
if [ -x "$out" ] && [ "$(firstline "$out")" = "etcd Version: ${version#v}" ]; then
	exit 0 # built already
fi
src=${LIFEBOAT_BUILD_SRC:-$root/.bin/src}/etcd-$version
mkdir -p "$src"
cd "$src"
if [ ! -f go.sum ]; then
	cat >go.mod <<EOF
module lifeboat.local/etcd-$version

go 1.26

require go.etcd.io/etcd/server/v3 $version

tool go.etcd.io/etcd/server/v3
EOF
	"$go" mod tidy
fi
"$go" build -trimpath -o "$out.tmp" go.etcd.io/etcd/server/v3
mv "$out.tmp" "$out"
firstline "$out"
