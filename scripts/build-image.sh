#!/usr/bin/env bash
# build-image.sh VERSION OUTDIR: lifeboat's container image without a Docker
# engine and without a base image (make image). For linux/amd64 and
# linux/arm64: the static binary (the flags of make build), the root
# filesystem of scripts/image-rootfs.sh, then scripts/image (a Go module of
# its own, go-containerregistry) writes one OCI index as a layout at
# OUTDIR/image/ and its tar at OUTDIR/image.tar (docker load, podman load),
# and prints the index digest. Reproducible: file times and the creation
# time are the commit's (SOURCE_DATE_EPOCH), so the same commit gives the
# same digest (on machines with the same ca-certificates and tzdata, whose
# versions the label dev.lifeboat.image.debian-packages records).
# Beside the index (tag VERSION) the layout tags each platform's image
# VERSION-ARCH (umoci unpack takes one image, not an index). Last, on
# stderr, it says where they are and how to load or push them;
# build-image.sh --howto VERSION OUTDIR prints only that.
set -euo pipefail
howto_only=
if [ "${1:-}" = --howto ]; then
	howto_only=1
	shift
fi
version=$1
out=$2
root=$(cd "$(dirname "$0")/.." && pwd)

# howto: where the image is and how to load or push it.
howto() {
	local name=${IMAGE:-lifeboat}
	local arch
	arch=$(uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
	cat >&2 <<EOF
image $name:$version (linux/amd64, linux/arm64):
  OCI layout  $out/image   (tags $version, and $version-amd64, $version-arm64 for one platform)
  tar         $out/image.tar
load it:
  docker load -i $out/image.tar
  podman load -i $out/image.tar
  ctr -n k8s.io images import $out/image.tar        # containerd, e.g. on a kubeadm node
  skopeo copy oci:$out/image:$version docker-daemon:$name:$version
  umoci unpack --image $out/image:$version-$arch BUNDLE
push both platforms to a registry:
  make push IMAGE_REF=registry.example.com/platform/lifeboat:$version
  skopeo copy --all oci:$out/image:$version docker://registry.example.com/platform/lifeboat:$version
EOF
}
if [ -n "$howto_only" ]; then
	howto
	exit 0
fi
GO=${GO:-go}
cd "$root"
work="$out/src/image"
mkdir -p "$work"
epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)
source=${IMAGE_SOURCE:-https://github.com/lifeboat-dev/lifeboat}
# The repository states no license yet: SPDX's NOASSERTION until it does.
licenses=${IMAGE_LICENSES:-NOASSERTION}
tag=${IMAGE:-lifeboat}:$version
args=()
for arch in amd64 arm64; do
	CGO_ENABLED=0 GOOS=linux GOARCH=$arch "$GO" build -trimpath -ldflags "-s -w -X main.Version=$version" \
		-o "$work/lifeboat-$arch" ./cmd/lifeboat
	./scripts/image-rootfs.sh "$work/rootfs-$arch" "$work/lifeboat-$arch"
	args+=(-platform "linux/$arch=$work/rootfs-$arch")
done
(cd scripts/image && "$GO" build -o "$work/build-image" .)
"$work/build-image" "${args[@]}" -layout "$out/image" -tar "$out/image.tar" -tag "$tag" -created "$epoch" \
	-label "org.opencontainers.image.source=$source" \
	-label "org.opencontainers.image.revision=$revision" \
	-label "org.opencontainers.image.version=$version" \
	-label "org.opencontainers.image.licenses=$licenses" \
	-label "org.opencontainers.image.title=lifeboat" \
	-label "dev.lifeboat.image.debian-packages=$(dpkg-query -W -f='${Package}=${Version} ' ca-certificates tzdata 2>/dev/null | sed 's/ $//')" \
	-label "org.opencontainers.image.created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)"
howto
