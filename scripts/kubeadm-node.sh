#!/usr/bin/env bash
# kubeadm-node.sh up|down|status|restart-kubelet: a single-node kubeadm control plane on
# this machine, for the tests (internal/test/kubeadmtest) and for a person
# (make kubeadm-up, make kubeadm-down). Root only.
#
# up: tears down whatever an earlier run left (so a second up after a
# killed first one works), then
#   - a network namespace $NODE_NETNS with a veth pair: 10.250.0.1/24 on
#     the host side ($NODE_VETH, lbk0), 10.250.0.2/24 inside, a default route
#     via 10.250.0.1 (kubelet takes the node address from it; the host does
#     not forward, so nothing leaves). Every process of the node runs in it
#     (nsenter --net, not `ip netns exec`, which remounts /sys and hides
#     the cgroup mounts from kubelet);
#   - containerd with its own root, state and socket under
#     /var/lib/lifeboat-kubeadm and /run/lifeboat-kubeadm (never the
#     machine's own containerd), restrict_oom_score_adj (root here lacks
#     CAP_SYS_RESOURCE: without it every sandbox fails with "can't get
#     final child's PID from pipe: EOF"), cgroupfs, a bridge CNI network;
#   - the images of $KUBE_IMAGES imported (scripts/build-kube-images.sh);
#   - kubeadm init (cgroup v1: failCgroupV1 false; no systemd: kubelet is
#     started by hand as soon as kubeadm has written its configuration;
#     no coredns, no kube-proxy; the control-plane taint removed so test
#     pods run on the node);
#   - waits until the apiserver answers /readyz at https://10.250.0.2:6443
#     and the node is Ready.
# containerd and kubelet run in the cgroup lifeboat-kubeadm (and the
# containers in kubepods), so down finds every process of the node there.
# Prints NODE_IP, KUBECONFIG, NETNS, CONTAINERD lines for the harness; logs go to
# $NODE_LOGS (default /var/log/lifeboat-kubeadm).
#
# restart-kubelet: what `systemctl restart kubelet` does on a real node.
#
# up tries a second time when the first fails.
#
# down: kills every process of the node (cgroups lifeboat-kubeadm and
# kubepods), unmounts what kubelet and containerd mounted, removes the
# cgroups, the pod network namespaces, the node's namespace (its
# iptables chains, bridge and veths go with it), CNI state, the node's
# files (/etc/kubernetes, /var/lib/kubelet, /var/lib/etcd and the data dirs
# restores left beside it, /var/lib/etcd.lifeboat-*,
# /var/lib/lifeboat-kubeadm, /run/lifeboat-kubeadm, /etc/cni/net.d/
# 10-lifeboat.conflist). Safe to run any number of times.
#
# Environment: KUBE_BIN (the directory of kubelet, kubeadm, kubectl; .bin),
# KUBE_IMAGES (the image archive; $KUBE_BIN/kube-images.tar), KUBE_VERSION
# (v1.37.2), ETCD_IMAGE_TAG (v3.7.3), NODE_NETNS (lifeboat-kubeadm),
# NODE_LOGS, NODE_TIMEOUT (seconds for up; 240).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${KUBE_BIN:-$root/.bin}
images=${KUBE_IMAGES:-$bin/kube-images.tar}
version=${KUBE_VERSION:-v1.37.2}
etcd_tag=${ETCD_IMAGE_TAG:-v3.7.3}
netns=${NODE_NETNS:-lifeboat-kubeadm}
hostif=${NODE_VETH:-lbk0} # at most 15 characters
logs=${NODE_LOGS:-/var/log/lifeboat-kubeadm}
timeout=${NODE_TIMEOUT:-240}
node_ip=10.250.0.2
host_ip=10.250.0.1
node_name=lifeboat-node
run=/run/lifeboat-kubeadm
state=/var/lib/lifeboat-kubeadm
sock=$run/containerd.sock
cgname=lifeboat-kubeadm
cni_conf=/etc/cni/net.d/10-lifeboat.conflist
pod_subnet=10.244.0.0/24
# the cgroup v1 controllers kubelet uses (cgroupfs driver)
controllers="cpu cpuacct cpuset memory devices freezer blkio pids systemd"

die() {
	echo "kubeadm-node: $*" >&2
	exit 1
}

innet() { nsenter --net=/var/run/netns/"$netns" "$@"; }

# procs: every process of the node: the lifeboat-kubeadm and kubepods
# cgroups of the pids controller (containerd, shims, kubelet, containers),
# and whatever else runs in the node's network namespace (what a test
# started there with Node.Command, e.g. a store or the agent, and left
# behind when it was killed before its cleanup).
procs() {
	local d
	for d in /sys/fs/cgroup/pids/$cgname /sys/fs/cgroup/pids/kubepods; do
		[ -d "$d" ] || continue
		find "$d" -name cgroup.procs -exec cat {} + 2>/dev/null || true
	done
	if [ -e /var/run/netns/"$netns" ]; then
		ip netns pids "$netns" 2>/dev/null || true
	fi
}

kill_all() {
	local i p
	for p in $(cat "$run"/*.pid 2>/dev/null); do
		kill -TERM "$p" 2>/dev/null || true
	done
	for i in $(seq 1 50); do
		p=$(procs)
		[ -z "$p" ] && return 0
		# shellcheck disable=SC2086
		kill -KILL $p 2>/dev/null || true
		sleep 0.2
	done
	die "processes of the node still alive after SIGKILL: $(procs | tr '\n' ' ')"
}

unmount_all() {
	local m
	# deepest first; lazily, so a busy mount does not stop the teardown
	for m in $(awk '{print $5}' /proc/self/mountinfo |
		grep -E "^(/var/lib/kubelet|$state|$run|/run/containerd|/var/run/netns/cni-|/run/netns/cni-)" | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
}

remove_cgroups() {
	local c
	for c in $controllers; do
		for d in /sys/fs/cgroup/$c/kubepods /sys/fs/cgroup/$c/$cgname; do
			[ -d "$d" ] || continue
			find "$d" -depth -type d -exec rmdir {} \; 2>/dev/null || true
			[ -d "$d" ] && echo "kubeadm-node: warning: cgroup $d not removed" >&2
		done
	done
	return 0
}

down() {
	kill_all
	unmount_all
	remove_cgroups
	local n
	for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^cni-' || true); do
		# pod namespaces of this node only exist while it runs: after
		# kill_all nothing holds them
		ip netns delete "$n" 2>/dev/null || true
	done
	if ip netns list | awk '{print $1}' | grep -qx "$netns"; then
		ip netns delete "$netns"
	fi
	ip link delete "$hostif" 2>/dev/null || true
	rm -rf /etc/kubernetes /var/lib/kubelet /var/lib/etcd /var/lib/etcd.lifeboat-* "$state" "$run" "$cni_conf" \
		/var/lib/cni/networks/lifeboat /var/lib/cni/results /var/log/pods /var/log/containers
	return 0
}

# incgroup LOG CMD...: runs CMD in the lifeboat-kubeadm cgroup of every
# controller, in the node's namespace, in the background, its output
# appended to LOG; prints its pid.
incgroup() {
	local c log=$1
	shift
	for c in $controllers; do
		mkdir -p /sys/fs/cgroup/$c/$cgname
		if [ "$c" = cpuset ]; then
			cat /sys/fs/cgroup/cpuset/cpuset.cpus >/sys/fs/cgroup/cpuset/$cgname/cpuset.cpus
			cat /sys/fs/cgroup/cpuset/cpuset.mems >/sys/fs/cgroup/cpuset/$cgname/cpuset.mems
		fi
	done
	# a subshell moves itself, then execs: the command starts inside
	(
		for c in $controllers; do
			echo "$BASHPID" >/sys/fs/cgroup/$c/$cgname/cgroup.procs
		done
		exec nsenter --net=/var/run/netns/"$netns" "$@"
	) >>"$log" 2>&1 </dev/null &
	echo $!
}

wait_for() { # SECONDS WHAT CMD...
	local secs=$1 what=$2 i
	shift 2
	for i in $(seq 1 $((secs * 5))); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.2
	done
	die "$what: not after ${secs}s (logs in $logs)"
}

network() {
	ip netns add "$netns"
	ip link add "$hostif" type veth peer name eth0 netns "$netns"
	ip addr add $host_ip/24 dev "$hostif"
	ip link set "$hostif" up
	innet ip link set lo up
	innet ip addr add $node_ip/24 dev eth0
	innet ip link set eth0 up
	innet ip route add default via $host_ip
	innet sysctl -qw net.ipv4.ip_forward=1
	innet sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
}

containerd_up() {
	local pause
	pause=$("$bin/kubeadm" config images list --kubernetes-version "$version" --image-repository lifeboat.local | grep /pause:)
	mkdir -p "$run" "$state" /etc/cni/net.d
	cat >"$run/containerd.toml" <<EOF
version = 2
root = "$state/containerd"
state = "$run/containerd"
[grpc]
  address = "$sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = false
EOF
	cat >"$cni_conf" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "lifeboat",
  "plugins": [
    {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": "$pod_subnet"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
	incgroup "$logs/containerd.log" containerd --config "$run/containerd.toml" >"$run/containerd.pid"
	wait_for 30 "containerd at $sock" ctr --address "$sock" version
	ctr --address "$sock" -n k8s.io images import --all-platforms "$images" >>"$logs/containerd.log"
}

kubeadm_config() {
	cat <<EOF
apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
localAPIEndpoint:
  advertiseAddress: $node_ip
  bindPort: 6443
nodeRegistration:
  name: $node_name
  criSocket: unix://$sock
  imagePullPolicy: Never
  taints: []
  ignorePreflightErrors: [SystemVerification, Swap, FileExisting-crictl]
skipPhases: [addon/coredns, addon/kube-proxy]
# Longer than kubeadm's defaults (4m, 1m): on a loaded 2-core machine the
# apiserver took more than a minute to take the admin user's
# ClusterRoleBinding, and init failed twice (docs/testing.md).
timeouts:
  controlPlaneComponentHealthCheck: 8m0s
  kubernetesAPICall: 4m0s
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: $version
imageRepository: lifeboat.local
networking:
  podSubnet: $pod_subnet
  serviceSubnet: 10.96.0.0/16
etcd:
  local:
    imageTag: $etcd_tag
apiServer:
  certSANs: [$node_ip, 127.0.0.1]
---
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failSwapOn: false
failCgroupV1: false
# The node shares the machine's disk with everything else on it: with
# kubelet's default thresholds (imagefs.available 15%) it evicted the tests'
# pods and tainted itself when the disk was 85% full (docs/testing.md).
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1Gi
  imagefs.available: 1Gi
  nodefs.inodesFree: 1%
  imagefs.inodesFree: 1%
# Nor may its image cleanup run: its images are imported, never pulled, and
# at 85% of the shared disk kubelet deleted the pause image while a restore
# had the static pods stopped (containerd 1.6 does not pin it), so the
# apiserver's pod could not start again (TestKubeadmRestoreLarge, branch
# noderestore2, 2026-12-04). 100 turns image cleanup off.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

# mirror_pods is true when the API lists the 4 static pods (etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler).
mirror_pods() {
	[ "$("$bin/kubectl" get pods -n kube-system -l tier=control-plane -o name | wc -l)" = 4 ]
}

# step says how long up has taken so far and what is done.
step() { echo "kubeadm-node: $((SECONDS - start))s: $*" >&2; }

# kubelet_start starts kubelet as kubeadm's systemd unit would, with the
# flags kubeadm wrote (saved in $run/kubelet.args).
kubelet_start() {
	# shellcheck disable=SC2046
	incgroup "$logs/kubelet.log" "$bin/kubelet" --bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf \
		--kubeconfig=/etc/kubernetes/kubelet.conf --config=/var/lib/kubelet/config.yaml $(cat "$run/kubelet.args") \
		>"$run/kubelet.pid"
}

# restart_kubelet is `systemctl restart kubelet` of a real node: SIGTERM,
# wait until it is gone, start it again.
restart_kubelet() {
	local pid i
	pid=$(cat "$run/kubelet.pid")
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 1 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	kubelet_start
	wait_for 60 "kubelet listening on 127.0.0.1:10248 after a restart" innet bash -c "exec 3<>/dev/tcp/127.0.0.1/10248"
}

# up tries twice: on a loaded machine kubelet has been seen to start the
# etcd pod 40 s after the apiserver's, which gave up on etcd meanwhile,
# and kubeadm init gave up on the apiserver (docs/testing.md).
up() {
	if (up_once); then
		return 0
	fi
	echo "kubeadm-node: up failed (above); removing the node and trying once more" >&2
	up_once
}

up_once() {
	local start=$SECONDS
	for f in kubelet kubeadm kubectl; do
		[ -x "$bin/$f" ] || die "$bin/$f missing: make kubeadm-tools"
	done
	[ -f "$images" ] || die "$images missing: make kubeadm-tools"
	command -v containerd >/dev/null || die "containerd missing: make kubeadm-tools (scripts/install-node-packages.sh)"
	down
	step "old node removed"
	mkdir -p "$logs" "$run"
	: >"$logs/containerd.log"
	: >"$logs/kubelet.log"
	network
	containerd_up
	step "network namespace, containerd, images imported"
	kubeadm_config >"$run/kubeadm.yaml"
	export PATH=$bin:$PATH
	innet "$bin/kubeadm" init --config "$run/kubeadm.yaml" >"$logs/kubeadm.log" 2>&1 &
	local init=$!
	# no systemd: kubelet starts by hand once kubeadm wrote its config
	local i
	for i in $(seq 1 $((60 * 5))); do
		[ -f /var/lib/kubelet/config.yaml ] && [ -f /var/lib/kubelet/kubeadm-flags.env ] && break
		kill -0 $init 2>/dev/null || {
			wait $init || true
			die "kubeadm init ended before writing kubelet's configuration: $(tail -5 "$logs/kubeadm.log")"
		}
		sleep 0.2
	done
	[ -f /var/lib/kubelet/kubeadm-flags.env ] || die "kubeadm wrote no /var/lib/kubelet/kubeadm-flags.env"
	# KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=... ..."
	local args
	args=$(sed -n 's/^KUBELET_KUBEADM_ARGS="\(.*\)"$/\1/p' /var/lib/kubelet/kubeadm-flags.env)
	echo "$args" >"$run/kubelet.args"
	kubelet_start
	step "kubeadm wrote kubelet's configuration; kubelet started"
	if ! wait $init; then
		die "kubeadm init failed: $(tail -20 "$logs/kubeadm.log")"
	fi
	step "kubeadm init done"
	export KUBECONFIG=/etc/kubernetes/admin.conf
	wait_for $timeout "apiserver /readyz at https://$node_ip:6443" "$bin/kubectl" get --raw /readyz
	step "apiserver ready"
	wait_for $timeout "node $node_name Ready" "$bin/kubectl" wait --for=condition=Ready "node/$node_name" --timeout=5s
	wait_for $timeout "the 4 control-plane mirror pods in the API" mirror_pods
	step "node Ready, mirror pods listed"
	echo "node up in $((SECONDS - start))s" >&2
	status
}

status() {
	[ -f /etc/kubernetes/admin.conf ] || die "no node (no /etc/kubernetes/admin.conf)"
	echo "NODE_IP=$node_ip"
	echo "NETNS=/var/run/netns/$netns"
	echo "KUBECONFIG=/etc/kubernetes/admin.conf"
	echo "CONTAINERD=$sock"
	echo "LOGS=$logs"
}

[ "$(id -u)" = 0 ] || die "run as root"
case ${1:-} in
up) up ;;
down) down ;;
status) status ;;
restart-kubelet) restart_kubelet ;;
*)
	echo "usage: $0 up|down|status|restart-kubelet" >&2
	exit 2
	;;
esac
