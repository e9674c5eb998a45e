#!/usr/bin/env bash
# Checks the Kubernetes manifests with the Go tests of ./validate, a module
# of its own (k8s.io/api, apimachinery and kustomize stay out of lifeboat's
# go.mod): every manifest decodes strictly into the Kubernetes API types
# (unknown or duplicate fields fail), every kustomization renders, and the
# rendered overlays are wired together and locked down.
set -euo pipefail
cd "$(dirname "$0")/validate"
out=$(gofmt -l .)
if [ -n "$out" ]; then
	echo "gofmt needed: $out"
	exit 1
fi
go vet ./...
go test -count=1 ./...
