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
. "$(dirname "$0")/build-lib.sh"
if built "etcd Version: ${version#v}"; then
	exit 0 # built already
fi
src=$srcroot/etcd-$version
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
