# lifeboat — build, test, bench. Everything the tests need is built or
# installed into .bin/ by these targets; nothing else is assumed.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/.bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.Version=$(VERSION)
ETCD_VERSION := v3.7.3
# Other etcd server versions the version tests run (verify, restore): the
# newest 3.5 and 3.6 releases the module proxy serves, and 3.5.15, the last
# release whose compaction removes a tombstone at the compact revision.
ETCD35_VERSION := v3.5.35
ETCD3515_VERSION := v3.5.15
ETCD36_VERSION := v3.6.16
VERSITYGW_VERSION := v1.8.0
# kube-apiserver for the end-to-end tests with a real Kubernetes writer.
KUBE_VERSION := v1.37.2
GOTEST_FLAGS ?= -timeout 30m

export PATH := $(BIN):$(PATH)

# Everything make compiles (lifeboat, the image, etcd, etcdctl, etcdutl,
# vet, the tests and the tools built from the module proxy) is compiled
# one way: static, with -trimpath, as the release binary and the image
# are, and without DWARF (the binaries are stripped with -s -w anyway,
# and Go's stack traces do not use it). Go's build cache keys a compiled
# package by its flags and by CGO_ENABLED, so before this the tests (cgo,
# full paths) compiled the ~830 packages they share with lifeboat a second
# time on a cold machine. Without DWARF a cold build of lifeboat took
# 265 s of CPU instead of 304 (13 % less; docs/testing.md). The race
# detector needs cgo: its runs (scripts/go-tests.sh) set it and compile
# apart anyway.
GO_BUILD_FLAGS := -trimpath -buildvcs=false -gcflags=all=-dwarf=false
export CGO_ENABLED := 0
export GOFLAGS := $(GO_BUILD_FLAGS)

.PHONY: chromium all build test test-scripts test-short lint bench bench-cpu bench-scale tools clean demo deploy-check image push kube-apiserver kube-binaries node-packages kubeadm-tools kubeadm-up kubeadm-down FORCE

all: build

build: $(BIN)/lifeboat

$(BIN)/lifeboat: $(shell find . -name '*.go' -not -path './.bin/*') go.mod go.sum
	$(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/lifeboat

# The etcd binary for end-to-end scripts and benchmarks, built from the
# same module version the code uses (go install refuses etcd's modules).
$(BIN)/etcd: go.mod
	$(GO) build -o $@ go.etcd.io/etcd/server/v3

# etcd servers of other versions for the version tests, each built from a
# throwaway module under .bin/src (scripts/build-etcd.sh; a few minutes
# each on 2 cores when nothing is cached).
# The script returns at once when the binary is of that version already.
$(BIN)/etcd-3.5: FORCE
	./scripts/build-etcd.sh $(ETCD35_VERSION) $@

$(BIN)/etcd-3.5.15: FORCE
	./scripts/build-etcd.sh $(ETCD3515_VERSION) $@

$(BIN)/etcd-3.6: FORCE
	./scripts/build-etcd.sh $(ETCD36_VERSION) $@

# Kubernetes: kube-apiserver (a real Kubernetes writer for the end-to-end
# tests, internal/test/kubetest) and the kubeadm node of the tests
# (internal/test/kubeadmtest, make kubeadm-up): kubelet, kubeadm, kubectl,
# kube-controller-manager and kube-scheduler, all six of the same
# k8s.io/kubernetes release from ONE throwaway module under .bin/src in ONE
# go build, so the ~2 000 packages they share compile once
# (scripts/build-kube.sh; docs/testing.md has the figures). A command that
# already reports the version is not built again. kube-binaries comes first
# in tools: under make -j2 (.ci/run) it starts first and the other tools'
# downloads overlap it. make kube-apiserver builds that one alone, from the
# same module.
KUBE_COMMANDS := kube-apiserver kube-controller-manager kube-scheduler kubelet kubeadm kubectl

kube-binaries: FORCE
	./scripts/build-kube.sh $(KUBE_VERSION) $(BIN) $(KUBE_COMMANDS)

$(BIN)/kube-apiserver: FORCE
	./scripts/build-kube.sh $(KUBE_VERSION) $(BIN) kube-apiserver

kube-apiserver: $(BIN)/kube-apiserver

# The node's images as one archive (scripts/build-kube-images.sh: pause,
# etcd, kube-apiserver, kube-controller-manager, kube-scheduler, without
# Docker or a registry) and Debian's containerd, runc and CNI plugins
# (scripts/install-node-packages.sh; root only: without root it says so and
# the node's tests skip, under CI=true it fails). Each returns at once when
# done.
KUBEADM_TOOLS := kube-binaries $(BIN)/kube-images.tar node-packages

$(BIN)/kube-images.tar: kube-binaries FORCE
	./scripts/build-kube-images.sh $(KUBE_VERSION) $(ETCD_VERSION) $(BIN) $@

node-packages:
	./scripts/install-node-packages.sh

# Debian's chromium, the headless browser of the fleet status page's test
# (scripts/install-chromium.sh; root only: without root it says so and the
# test skips, under CI=true it fails). After node-packages: both run
# apt-get, which takes a lock (make -j2).
chromium: | node-packages
	./scripts/install-chromium.sh

kubeadm-tools: $(KUBEADM_TOOLS)

# A kubeadm node for a person (root): up prints its kubeconfig and address,
# down removes everything it made (scripts/kubeadm-node.sh).
kubeadm-up: kubeadm-tools
	KUBE_BIN=$(BIN) KUBE_VERSION=$(KUBE_VERSION) ETCD_IMAGE_TAG=$(ETCD_VERSION) ./scripts/kubeadm-node.sh up

kubeadm-down:
	./scripts/kubeadm-node.sh down

FORCE:

# etcdctl: the baseline the benchmarks compare against (a go.mod tool).
$(BIN)/etcdctl: go.mod
	$(GO) build -o $@ go.etcd.io/etcd/etcdctl/v3

# etcdutl: restores the file lifeboat fetch writes (tests and e2e).
$(BIN)/etcdutl: go.mod
	$(GO) build -o $@ go.etcd.io/etcd/etcdutl/v3

# age and age-keygen: the "recovering without lifeboat" path in e2e, at the
# version of the age module lifeboat uses (the CLIs need modules lifeboat
# does not, so they are installed, not built from go.mod; Debian's age is
# older). zstd's CLI is Debian's (the Go zstd lifeboat uses has none).
AGE_VERSION := v1.3.2
$(BIN)/age:
	GOBIN=$(BIN) GOFLAGS='$(GO_BUILD_FLAGS)' $(GO) install filippo.io/age/cmd/age@$(AGE_VERSION) filippo.io/age/cmd/age-keygen@$(AGE_VERSION)

# s2d: the "recovering without lifeboat" path of a store with compression
# s2 in e2e (docs/restore.md), at the version of the compress module
# lifeboat encodes with (read from go.mod only when s2d is built).
S2D_VERSION = $(shell $(GO) list -m -f '{{.Version}}' github.com/klauspost/compress 2>/dev/null)
$(BIN)/s2d: go.mod
	GOBIN=$(BIN) GOFLAGS='$(GO_BUILD_FLAGS)' $(GO) install github.com/klauspost/compress/s2/cmd/s2d@$(S2D_VERSION)

# versitygw: a real S3 server for the store tests.
$(BIN)/versitygw:
	GOBIN=$(BIN) $(GO) install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION)

# helm: renders, lints and installs the chart (deploy/helm/lifeboat) in the
# deploy tests; crane: pushes the image to a loopback registry and reads it
# back there (go install from the module proxy: helm about 4 CPU-minutes
# cold, crane about 15 s).
HELM_VERSION := v4.3.1
CRANE_VERSION := v0.22.1
$(BIN)/helm:
	GOBIN=$(BIN) GOFLAGS='$(GO_BUILD_FLAGS)' $(GO) install helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)

$(BIN)/crane:
	GOBIN=$(BIN) GOFLAGS='$(GO_BUILD_FLAGS)' $(GO) install github.com/google/go-containerregistry/cmd/crane@$(CRANE_VERSION)

# Prometheus: promtool lints the agent's metrics in the Go tests and checks
# the alert rules; the server is the real Prometheus of the fleet's alert
# test (deploy/fleet_prometheus_test.go). Both from Debian's prometheus
# package, extracted, not installed (scripts/install-prometheus.sh says why
# not built); it returns at once when both are there.
# (One recipe makes both: a grouped target, so make -j2 runs it once.)
$(BIN)/promtool $(BIN)/prometheus &:
	./scripts/install-prometheus.sh $(BIN)

tools: $(KUBEADM_TOOLS) chromium $(BIN)/prometheus $(BIN)/etcd $(BIN)/etcd-3.5 $(BIN)/etcd-3.5.15 $(BIN)/etcd-3.6 $(BIN)/etcdctl $(BIN)/etcdutl $(BIN)/age $(BIN)/s2d $(BIN)/versitygw $(BIN)/promtool $(BIN)/helm $(BIN)/crane

lint:
	@out=$$(gofmt -l $$(git ls-files -co --exclude-standard '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Unit, integration (real etcd in-process, real versitygw) and end-to-end
# tests (the built binary against the etcd binary), the race detector's
# runs and the deploy checks, with the kubeadm node's tests beside them in
# a second track (scripts/go-tests.sh says why and how).
# The build scripts' own tests run first: every tool below is built by them.
test: test-scripts tools build lint image
	VERSITYGW=$(BIN)/versitygw LIFEBOAT_BIN=$(BIN)/lifeboat ETCD_BIN=$(BIN)/etcd ETCDUTL_BIN=$(BIN)/etcdutl \
	  ETCD35_BIN=$(BIN)/etcd-3.5 ETCD3515_BIN=$(BIN)/etcd-3.5.15 ETCD36_BIN=$(BIN)/etcd-3.6 \
	  KUBE_APISERVER_BIN=$(BIN)/kube-apiserver \
	  HELM_BIN=$(BIN)/helm CRANE_BIN=$(BIN)/crane IMAGE_LAYOUT=$(BIN)/image PROMETHEUS_BIN=$(BIN)/prometheus \
	  GO=$(GO) GOTEST_FLAGS="$(GOTEST_FLAGS)" ./scripts/go-tests.sh

deploy-check:
	./deploy/check.sh

# The container image, without a Docker engine or a base image: linux/amd64
# and linux/arm64 in one OCI index, written as a layout at .bin/image/ and
# its tar at .bin/image.tar (docker load, podman load); reproducible from a
# commit (scripts/build-image.sh). Push it with
#   make push IMAGE_REF=REGISTRY/lifeboat:$(VERSION)
IMAGE ?= lifeboat
image:
	IMAGE=$(IMAGE) GO=$(GO) ./scripts/build-image.sh $(VERSION) $(BIN)

# make push IMAGE_REF=registry.example.com/platform/lifeboat:TAG: both
# platforms of make image's layout (crane push takes a layout of one
# entry; this one also tags each platform). PUSH_FLAGS=-insecure for a
# plain-HTTP registry.
push:
	@test -n "$(IMAGE_REF)" || { echo "make push IMAGE_REF=REGISTRY/REPOSITORY:TAG" >&2; exit 2; }
	cd scripts/image && $(GO) run . push $(PUSH_FLAGS) $(BIN)/image $(VERSION) $(IMAGE_REF)

# Relative names of the binaries: make .bin/etcd is make $(CURDIR)/.bin/etcd.
.bin/%: $(BIN)/% ;

test-scripts:
	./scripts/test-scripts.sh

test-short:
	$(GO) test -short ./...

# Benchmarks: Go benchmarks, then the side-by-side run against etcdctl on
# a ~1 GiB database (scripts/bench.sh; figures go to docs/benchmarks.md).
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem ./...
	./scripts/bench.sh

# issue 24's paired runs (CPU, peak RSS, wall) against etcdctl and a
# user's own drill; wall ratios need a quiet machine.
bench-cpu: tools build
	./scripts/bench-cpu.sh

# issue 31's big-cluster bench: every command at SIZE (1GB, 2GB, 4GB, 8GB)
# beside the user's own tools; not in make test (minutes to hours).
SIZE ?= 1GB
bench-scale: tools build
	./scripts/bench-scale.sh $(SIZE)

demo: build
	$(BIN)/lifeboat demo

clean:
	rm -rf $(BIN) lifeboat-demo
