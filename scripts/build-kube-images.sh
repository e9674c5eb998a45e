#!/usr/bin/env bash
# build-kube-images.sh KUBE_VERSION ETCD_VERSION BINDIR OUT: the container
# images of the kubeadm node of the tests (internal/test/kubeadmtest) as one
# Docker archive OUT, for `ctr -n k8s.io images import`: pause (a Go pause,
# scripts/kube-images/pause), etcd (the etcd of lifeboat's go.mod, built
# here with CGO_ENABLED=0: the image has no C library; tagged ETCD_VERSION,
# kubeadm's etcd.local.imageTag), and
# kube-apiserver, kube-controller-manager, kube-scheduler (BINDIR/, built by
# scripts/build-kube.sh). Their names are the ones BINDIR/kubeadm lists for
# KUBE_VERSION under the image repository lifeboat.local (kubeadm's
# --image-repository; coredns and kube-proxy are not built: the node skips
# those addons). No Docker engine, no registry: scripts/kube-images (a Go
# module of its own, go-containerregistry). Returns at once when OUT is
# newer than every binary and source it is made of.
set -euo pipefail
if [ $# -ne 4 ]; then
	echo "usage: $0 KUBE_VERSION ETCD_VERSION BINDIR OUT (e.g. $0 v1.37.2 v3.7.3 .bin .bin/kube-images.tar)" >&2
	exit 2
fi
version=$1
etcd_version=$2
bindir=$3
out=$4
. "$(dirname "$0")/build-lib.sh"
case $bindir in
/*) ;;
*) bindir=$root/$bindir ;;
esac
repo=lifeboat.local
tool=$root/scripts/kube-images
inputs=("$bindir/kubeadm" "$root/go.mod" "$bindir/kube-apiserver" "$bindir/kube-controller-manager"
	"$bindir/kube-scheduler" "$tool/main.go" "$tool/pause/main.go" "$tool/go.mod" "$0")
for f in "${inputs[@]}"; do
	if [ ! -f "$f" ]; then
		echo "$0: $f is missing (make kube-binaries builds the binaries)" >&2
		exit 1
	fi
done
fresh=1
if [ -f "$out" ]; then
	for f in "${inputs[@]}"; do
		if [ "$f" -nt "$out" ]; then
			fresh=0
		fi
	done
else
	fresh=0
fi
if [ $fresh = 1 ]; then
	exit 0 # built already
fi
work=$srcroot/kube-images
mkdir -p "$work"
(cd "$tool" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "-s -w" -o "$work/pause" ./pause &&
	"$go" build -o "$work/kube-images" .)
(cd "$root" && CGO_ENABLED=0 "$go" build -trimpath -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3)
args=()
for ref in $("$bindir/kubeadm" config images list --kubernetes-version "$version" --image-repository "$repo"); do
	img=${ref##*/}
	case ${img%%:*} in
	pause) args+=(-image "$ref=$work/pause") ;;
	etcd) args+=(-image "$repo/etcd:$etcd_version=$work/etcd") ;;
	kube-apiserver | kube-controller-manager | kube-scheduler)
		if ! "$go" version -m "$bindir/${img%%:*}" | grep -q 'CGO_ENABLED=0'; then
			echo "$0: $bindir/${img%%:*} is not statically linked: the image has no C library (scripts/build-kube.sh builds with CGO_ENABLED=0)" >&2
			exit 1
		fi
		args+=(-image "$ref=$bindir/${img%%:*}")
		;;
	esac
done
if [ ${#args[@]} -ne 10 ]; then
	echo "$0: kubeadm config images list named ${#args[@]}/2 of the 5 images (pause, etcd, kube-apiserver, kube-controller-manager, kube-scheduler): ${args[*]}" >&2
	exit 1
fi
"$work/kube-images" -o "$out" -created "${SOURCE_DATE_EPOCH:-0}" "${args[@]}"
echo "$out: ${args[*]}" | sed "s|$bindir/||g; s|$work/||g; s| -image|\n  |g" >&2
