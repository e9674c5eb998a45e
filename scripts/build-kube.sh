#!/usr/bin/env bash
# build-kube.sh VERSION OUTDIR COMMAND...: builds the named commands of
# k8s.io/kubernetes at VERSION (e.g. v1.37.2) into OUTDIR/COMMAND: any of
# kube-apiserver (the Kubernetes writer of the end-to-end tests,
# internal/test/kubetest), kube-controller-manager, kube-scheduler, kubelet,
# kubeadm, kubectl (the kubeadm node of the tests, internal/test/kubeadmtest).
# make kube-binaries names all six, make kube-apiserver that one.
# k8s.io/kubernetes refuses `go install mod@version` (its go.mod replaces
# every k8s.io staging module with ./staging/src/k8s.io/<name>, and a
# dependency's replace directives do not apply to the module that requires
# it), so the binaries come from one throwaway module under
# .bin/src/kube-VERSION that requires k8s.io/kubernetes at VERSION, names
# the six commands as tools and replaces each staging module (the list is
# read from kubernetes' own go.mod) with the published module of the same
# name at v0.MINOR.PATCH. The version is stamped as kubernetes' own build
# does, in component-base and in client-go (kubeadm refuses to init with an
# unstamped kubelet or kubeadm), so a command that already reports VERSION
# is not built again: a second run returns at once. The commands still
# missing are built in ONE `go build` with -trimpath -ldflags '-s -w'
# (they share about 2 000 packages, compiled once; the links run
# side by side, about 2 GB of memory each): docs/testing.md has the cold
# and warm figures. Set GOFLAGS=-p=1 on a busy or small machine.
set -euo pipefail
if [ $# -lt 3 ]; then
	echo "usage: $0 VERSION OUTDIR COMMAND... (e.g. $0 v1.37.2 .bin kubelet kubeadm)" >&2
	exit 2
fi
version=$1
out=$2
shift 2
case $version in
v1.*.*) ;;
*)
	echo "$0: version $version: want v1.MINOR.PATCH (a k8s.io/kubernetes release)" >&2
	exit 2
	;;
esac
all="kube-apiserver kube-controller-manager kube-scheduler kubelet kubeadm kubectl"
for c in "$@"; do
	case " $all " in
	*" $c "*) ;;
	*)
		echo "$0: command $c: want one of $all" >&2
		exit 2
		;;
	esac
done
. "$(dirname "$0")/build-lib.sh"
outdir=$out

# reported CMD: the version the binary at OUTDIR/CMD reports, or nothing.
# kubeadm and kubectl have no --version flag; kubectl's client version
# needs no cluster.
reported() {
	local bin=$outdir/$1 v
	[ -x "$bin" ] || return 0
	case $1 in
	kubeadm) v=$("$bin" version -o short 2>/dev/null) || return 0 ;;
	kubectl) v=$("$bin" version --client 2>/dev/null) || return 0 ;;
	*) v=$(firstline "$bin") ;;
	esac
	case $v in
	*"$version"*) printf '%s\n' "$version" ;;
	esac
}

missing=()
for c in "$@"; do
	if [ "$(reported "$c")" != "$version" ]; then
		missing+=("$c")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0 # built already
fi
staging=v0.${version#v1.} # k8s.io/kubernetes v1.37.2 ships its staging modules as v0.37.2
minor=${version#v1.}
minor=${minor%%.*}
src=$srcroot/kube-$version
mkdir -p "$src" "$outdir"
cd "$src"
if [ ! -f tidy.done ]; then # go.sum alone may be left by a failed run
	{
		printf 'module lifeboat.local/kube-%s\n\ngo 1.26\n\nrequire k8s.io/kubernetes %s\n\n' "$version" "$version"
		for c in $all; do
			printf 'tool k8s.io/kubernetes/cmd/%s\n' "$c"
		done
	} >go.mod
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
ldflags="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags="$ldflags -X $v.gitVersion=$version -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
done
pkgs=()
for c in "${missing[@]}"; do
	pkgs+=("k8s.io/kubernetes/cmd/$c")
done
tmp=$outdir/.kube-build.$$
rm -rf "$tmp"
mkdir "$tmp"
trap 'rm -rf "$tmp"' EXIT
echo "building ${missing[*]} of k8s.io/kubernetes $version" >&2
CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$tmp/" "${pkgs[@]}"
for c in "${missing[@]}"; do
	mv "$tmp/$c" "$outdir/$c"
	if [ "$(reported "$c")" != "$version" ]; then
		echo "$0: $outdir/$c does not report $version after the build" >&2
		exit 1
	fi
done
