#!/usr/bin/env bash
# test-scripts.sh: tests of the build scripts themselves, run by make test
# before anything is built. A fake `go` (GO=...) and fake binaries whose
# --version prints a long text after the version line stand in for the real
# ones, so each case runs in well under a second.
#
# The case that made this file: with `set -o pipefail`, `BIN --version |
# head -1` and `BIN --version | grep -q` fail with 141 (SIGPIPE) when the
# reader exits before BIN has written everything; CI failed on it in
# build-etcd.sh (make: Error 141) and the version check rebuilt a binary
# that was already there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() {
	echo "test-scripts: FAIL: $*" >&2
	exit 1
}

# fakebin PATH VERSIONLINE: an executable whose --version prints
# VERSIONLINE and then far more than a pipe holds.
fakebin() {
	cat >"$1" <<FAKE
#!/usr/bin/env bash
echo "$2"
seq 1 200000
FAKE
	chmod +x "$1"
}

# A go that builds the fake binary (for -o OUT) and tidies nothing.
cat >"$work/go-builds" <<'FAKE'
#!/usr/bin/env bash
set -e
case $1 in
mod) : >go.sum ;;
build)
	while [ $# -gt 0 ]; do
		if [ "$1" = -o ]; then out=$2; fi
		shift
	done
	cat >"$out" <<BIN
#!/usr/bin/env bash
echo "etcd Version: 0.0.0"
seq 1 200000
BIN
	chmod +x "$out"
	;;
esac
FAKE
chmod +x "$work/go-builds"
# A go that must not be called (the binary is there already).
printf '#!/bin/sh\necho "go called: $*" >&2\nexit 3\n' >"$work/go-fails"
chmod +x "$work/go-fails"

# 1. build-etcd.sh with the binary already there: returns at once, calls no go.
fakebin "$work/etcd-a" "etcd Version: 0.0.0"
LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-fails "$root/scripts/build-etcd.sh" v0.0.0 "$work/etcd-a" ||
	fail "build-etcd.sh rebuilt (or failed on) a binary of the right version: exit $?"

# 2. build-etcd.sh building: succeeds and prints the version line only.
got=$(LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-builds "$root/scripts/build-etcd.sh" v0.0.0 "$work/etcd-b") ||
	fail "build-etcd.sh failed after a good build: exit $?"
[ "$got" = "etcd Version: 0.0.0" ] || fail "build-etcd.sh printed $(printf %q "${got:0:80}")"
[ -x "$work/etcd-b" ] || fail "build-etcd.sh left no binary"

# 3. build-etcd.sh with a binary of another version: rebuilds it.
fakebin "$work/etcd-c" "etcd Version: 9.9.9"
LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-builds "$root/scripts/build-etcd.sh" v0.0.0 "$work/etcd-c" >/dev/null ||
	fail "build-etcd.sh failed to rebuild: exit $?"
"$work/etcd-c" --version 2>/dev/null | sed -n 1p | grep -qx "etcd Version: 0.0.0" ||
	fail "build-etcd.sh kept a binary of another version"

# 4. build-kube.sh of kube-apiserver alone (make kube-apiserver) with the
# binary already there: returns at once.
mkdir -p "$work/apiserver"
fakebin "$work/apiserver/kube-apiserver" "Kubernetes v1.0.0"
LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-fails "$root/scripts/build-kube.sh" v1.0.0 "$work/apiserver" kube-apiserver ||
	fail "build-kube.sh rebuilt (or failed on) a kube-apiserver of the right version: exit $?"

# 5. build-kube.sh with every binary already there (each asked the way it
# answers: kubelet --version, kubeadm version -o short, kubectl version
# --client, all printing far more than a pipe holds): returns at once; a
# command it does not know is refused.
mkdir -p "$work/kube"
fakebin "$work/kube/kubelet" "Kubernetes v1.0.0"
fakebin "$work/kube/kube-scheduler" "Kubernetes v1.0.0"
fakebin "$work/kube/kubeadm" "v1.0.0"
fakebin "$work/kube/kubectl" "Client Version: v1.0.0"
LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-fails "$root/scripts/build-kube.sh" v1.0.0 "$work/kube" kubelet kube-scheduler kubeadm kubectl ||
	fail "build-kube.sh rebuilt (or failed on) binaries of the right version: exit $?"
if LIFEBOAT_BUILD_SRC=$work/src GO=$work/go-fails "$root/scripts/build-kube.sh" v1.0.0 "$work/kube" kube-proxy 2>/dev/null; then
	fail "build-kube.sh accepted kube-proxy, a command it does not build"
fi

# bench-scale.sh refuses a size it cannot seed (exit 2) before building or
# starting anything.
set +e
out=$("$root/scripts/bench-scale.sh" 8TB 2>&1)
rc=$?
set -e
[ $rc -eq 2 ] && [[ $out == *"want whole gigabytes"* ]] || fail "bench-scale.sh 8TB: exit $rc, $out"
# ... and a run the disk cannot hold, with a clear error, before it
# checks its tools, builds or seeds anything (1000 runs at 99GB: ~99 TB).
set +e
out=$(BENCH_DIR=$work/scale BENCH_RUNS=1000 "$root/scripts/bench-scale.sh" 99GB 2>&1)
rc=$?
set -e
[ $rc -eq 1 ] && [[ $out == *"not enough disk for a 99GB run"* ]] && [[ $out == *"set BENCH_DIR"* ]] ||
	fail "bench-scale.sh 99GB with 1000 runs: exit $rc, $out"

# .bin is the tools' cache, never in the repository: a .bin symlink (a
# worktree's, to the main tree's tools) was once committed and merged,
# and the checkout replaced the main tree's ignored .bin directory, every
# built tool in it, with the symlink.
if [ -n "$(git -C "$root" ls-files .bin)" ]; then
	fail ".bin is tracked by git: git rm --cached .bin (it is the tools' cache; .gitignore has /.bin)"
fi
# 6. make takes a binary by its relative path as by its absolute one:
# `make .bin/etcd` does what `make $PWD/.bin/etcd` does (-n -B: print
# the commands, as if out of date, and run none).
for t in etcd etcdutl crane lifeboat promtool; do
	rel=$(cd "$root" && make -n -B ".bin/$t" GO=go 2>&1) || fail "make .bin/$t: $rel"
	abs=$(cd "$root" && make -n -B "$root/.bin/$t" GO=go 2>&1) || fail "make $root/.bin/$t: $abs"
	[ "$rel" = "$abs" ] || fail "make .bin/$t is not make $root/.bin/$t: got
$rel
want
$abs"
done

# 7. go-tests.sh runs both tracks to the end and fails when either failed:
# the node's track failing alone, or a script of the main track, is a
# non-zero exit (a fake go and fake e2e.sh and check.sh in a copy).
gt=$work/gotests
mkdir -p "$gt/scripts" "$gt/deploy"
cp "$root/scripts/go-tests.sh" "$gt/scripts/"
printf '#!/bin/sh\necho e2e.sh ran\n' >"$gt/scripts/e2e.sh"
printf '#!/bin/sh\necho check.sh ran; exit ${CHECK_RC:-0}\n' >"$gt/deploy/check.sh"
cat >"$gt/go" <<'FAKE'
#!/bin/sh
echo "go $* CGO_ENABLED=$CGO_ENABLED"
case "$*" in *"-run ^(TestKubeadm"*) exit ${NODE_RC:-0} ;; esac
exit 0
FAKE
chmod +x "$gt/go" "$gt/scripts/e2e.sh" "$gt/deploy/check.sh"
out=$(GO=$gt/go CGO_ENABLED=0 "$gt/scripts/go-tests.sh") || fail "go-tests.sh with every track passing: exit $?: $out"
for want in "-skip ^(TestKubeadm|TestNode) ./... CGO_ENABLED=0" "go test -race" "CGO_ENABLED=1" "e2e.sh ran" "check.sh ran" \
	"-run ^(TestKubeadm|TestNode) ./internal/test/e2e ./internal/test/kubeadmtest CGO_ENABLED=0"; do
	case $out in *"$want"*) ;; *) fail "go-tests.sh: no '$want' in: $out" ;; esac
done
if NODE_RC=1 GO=$gt/go "$gt/scripts/go-tests.sh" >/dev/null; then
	fail "go-tests.sh passed with the node's track failing"
fi
if CHECK_RC=1 GO=$gt/go "$gt/scripts/go-tests.sh" >/dev/null; then
	fail "go-tests.sh passed with deploy/check.sh failing"
fi

# 8. install-debian.sh (the node's packages, chromium): nothing missing
# calls no apt-get; missing without root installs nothing and exits 0,
# but 2 under CI=true; a package that leaves its file missing fails (a
# fake id and apt-get on PATH).
deb=$work/deb
mkdir -p "$deb"
printf '#!/bin/sh\necho apt-get "$@" >>%s/apt.log\n' "$deb" >"$deb/apt-get"
printf '#!/bin/sh\necho ${FAKE_UID:-1000}\n' >"$deb/id"
chmod +x "$deb/apt-get" "$deb/id"
inst() { PATH=$deb:$PATH "$root/scripts/install-debian.sh" "the tests" "$@"; }
inst present:"$root/Makefile" || fail "install-debian.sh with nothing missing: exit $?"
[ ! -e "$deb/apt.log" ] || fail "install-debian.sh ran apt-get with nothing missing"
out=$(CI= inst gone:"$deb/nothing" 2>&1) || fail "install-debian.sh without root outside CI: exit $?"
case $out in *"gone missing and not root"*) ;; *) fail "install-debian.sh without root: said: $out" ;; esac
rc=0
CI=true inst gone:"$deb/nothing" 2>/dev/null || rc=$?
[ "$rc" = 2 ] || fail "install-debian.sh without root under CI=true: exit $rc, want 2"
rc=0
out=$(FAKE_UID=0 inst gone:"$deb/nothing" 2>&1) || rc=$?
[ "$rc" = 1 ] || fail "install-debian.sh whose package left its file missing: exit $rc, want 1: $out"
grep -q "install -y -qq --no-install-recommends gone" "$deb/apt.log" || fail "install-debian.sh did not install gone: $(cat "$deb/apt.log")"

echo "test-scripts: ok"
