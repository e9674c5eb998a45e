# build-lib.sh: what the tool build scripts (build-etcd.sh, build-kube.sh,
# build-kube-images.sh) share; sourced by them, after they have set
# version and out from their arguments.

# root is the repository, go the Go command (GO overrides), out made
# absolute, src the throwaway modules' parent (LIFEBOAT_BUILD_SRC
# overrides .bin/src, for scripts/test-scripts.sh).
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
go=${GO:-go}
case $out in
/*) ;;
*) out=$root/$out ;;
esac
srcroot=${LIFEBOAT_BUILD_SRC:-$root/.bin/src}

# firstline BIN: the first line BIN --version prints. The whole output is
# read before it is cut: with pipefail, `BIN --version | head -1` (or
# grep -q) fails with SIGPIPE when the reader exits first
# (scripts/test-scripts.sh).
firstline() {
	local v
	v=$("$1" --version 2>/dev/null) || return 0
	printf '%s\n' "${v%%$'\n'*}"
}

# built WANT: true when out is there and says WANT as its first line.
built() {
	[ -x "$out" ] && [ "$(firstline "$out")" = "$1" ]
}
