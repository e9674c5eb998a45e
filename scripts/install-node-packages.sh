#!/usr/bin/env bash
# install-node-packages.sh: the Debian packages a kubeadm node of the tests
# needs (internal/test/kubeadmtest): containerd (Debian's 1.6.x serves the
# CRI v1 that kubelet 1.37 speaks), runc, the CNI plugins (bridge,
# host-local, loopback, portmap), iptables (kubelet's and the bridge
# plugin's chains), conntrack and socat (kubeadm's preflight), iproute2 and
# util-linux (the network namespace: ip, nsenter); and umoci, with which
# TestImageUmociUnpack unpacks make image's layout. install-debian.sh
# installs the missing ones (root only; under CI=true missing root fails).
set -euo pipefail
exec "$(dirname "$0")/install-debian.sh" "the kubeadm node's tests" \
	containerd:/usr/bin/containerd \
	runc:/usr/sbin/runc \
	containernetworking-plugins:/usr/lib/cni/bridge \
	iptables:/usr/sbin/iptables \
	conntrack:/usr/sbin/conntrack \
	socat:/usr/bin/socat \
	iproute2:/usr/sbin/ip \
	util-linux:/usr/bin/nsenter \
	umoci:/usr/bin/umoci
