#!/usr/bin/env bash
# build-kube-apiserver.sh VERSION OUT: builds kube-apiserver of
# k8s.io/kubernetes at VERSION (e.g. v1.37.2) into OUT, for the end-to-end
# tests that need a real Kubernetes writer (internal/test/kubetest).
# k8s.io/kubernetes refuses `go install mod@version`: its go.mod replaces
# every k8s.io staging module with ./staging/src/k8s.io/<name>, and a
# dependency's replace directives do not apply to the module that requires
# it. So the binary is built from a throwaway module under
# .bin/src/kube-apiserver-VERSION that requires k8s.io/kubernetes at VERSION
# as a tool and replaces each staging module (the list is read from
# kubernetes' own go.mod) with the published module of the same name at
# v0.MINOR.PATCH. The version is stamped as kubernetes' own build does
# (-X k8s.io/component-base/version.gitVersion=...), so `--version` says
# "Kubernetes VERSION" and a second run returns at once. A cold build takes
# about 15 CPU-minutes and 2.4 GB of memory at the link (8 minutes of wall
# time on 2 idle cores; docs/testing.md); set GOFLAGS=-p=1 to build one
# package at a time on a busy machine.
set -euo pipefail
if [ $# -ne 2 ]; then
	echo "usage: $0 VERSION OUT (e.g. $0 v1.37.2 .bin/kube-apiserver)" >&2
	exit 2
fi
version=$1
out=$2
case $version in
v1.*.*) ;;
*)
	echo "$0: version $version: want v1.MINOR.PATCH (a k8s.io/kubernetes release)" >&2
	exit 2
	;;
esac
. "$(dirname "$0")/build-lib.sh"
if built "Kubernetes $version"; then
	exit 0 # built already
fi
staging=v0.${version#v1.} # k8s.io/kubernetes v1.37.2 ships its staging modules as v0.37.2
minor=${version#v1.}
minor=${minor%%.*}
src=$srcroot/kube-apiserver-$version
mkdir -p "$src"
cd "$src"
if [ ! -f tidy.done ]; then # go.sum alone may be left by a failed run
	cat >go.mod <<EOF
module lifeboat.local/kube-apiserver-$version

go 1.26

require k8s.io/kubernetes $version

tool k8s.io/kubernetes/cmd/kube-apiserver
EOF
	gomod=$(GOFLAGS=-mod=mod "$go" mod download -json "k8s.io/kubernetes@$version" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
	if [ ! -f "$gomod" ]; then
		echo "$0: go.mod of k8s.io/kubernetes@$version not found after go mod download" >&2
		exit 1
	fi
	mods=$(sed -n 's|^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*$|\1|p' "$gomod")
	if [ -z "$mods" ]; then
		echo "$0: no staging replace lines in $gomod" >&2
		exit 1
	fi
	for m in $mods; do
		"$go" mod edit -replace "$m=$m@$staging"
	done
	"$go" mod tidy
	touch tidy.done
fi
pkg=k8s.io/kubernetes/cmd/kube-apiserver
ldflags="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
done
CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$out.tmp" "$pkg"
mv "$out.tmp" "$out"
"$out" --version
