#!/usr/bin/env bash
# install-node-packages.sh: the Debian packages a kubeadm node of the tests
# needs (internal/test/kubeadmtest): containerd (Debian's 1.6.x serves the
# CRI v1 that kubelet 1.37 speaks), runc, the CNI plugins (bridge,
# host-local, loopback, portmap), iptables (kubelet's and the bridge
# plugin's chains), conntrack and socat (kubeadm's preflight), iproute2 and
# util-linux (the network namespace: ip, nsenter); and umoci, with which
# TestImageUmociUnpack unpacks make image's layout. Installs only what is
# missing, so a second run returns at once; `apt-get update` runs once,
# before the first install. Without root it installs nothing and says so
# (make test runs it; the node's tests skip without root), unless
# CI=true: then it fails, as the tests would.
set -euo pipefail
# package:file pairs: the package is installed when the file is missing.
want=(
	containerd:/usr/bin/containerd
	runc:/usr/sbin/runc
	containernetworking-plugins:/usr/lib/cni/bridge
	iptables:/usr/sbin/iptables
	conntrack:/usr/sbin/conntrack
	socat:/usr/bin/socat
	iproute2:/usr/sbin/ip
	util-linux:/usr/bin/nsenter
	umoci:/usr/bin/umoci
)
missing=()
for w in "${want[@]}"; do
	if [ ! -e "${w#*:}" ]; then
		missing+=("${w%%:*}")
	fi
done
if [ ${#missing[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	echo "$0: ${missing[*]} missing and not root: not installed (the kubeadm node's tests skip; run as root)" >&2
	if [ "${CI:-}" = true ]; then
		exit 2
	fi
	exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
for w in "${want[@]}"; do
	if [ ! -e "${w#*:}" ]; then
		echo "$0: ${w#*:} still missing after installing ${w%%:*}" >&2
		exit 1
	fi
done
