#!/usr/bin/env bash
# Checks every deployment file: the systemd units (systemd-analyze verify
# and security), the alert rules (promtool check and test rules), and the
# Kubernetes manifests (strict decoding and kustomize rendering, in the Go
# module deploy/kubernetes/validate). Each installs what it needs when it is
# missing. The Go tests of package deploy (go test ./deploy) tie these
# files to the code; make test runs them with the rest.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
fail=0
for check in systemd prometheus kubernetes; do
	echo "== deploy/$check"
	if ! "$here/$check/check.sh"; then
		echo "FAIL deploy/$check"
		fail=1
	fi
done
exit "$fail"
