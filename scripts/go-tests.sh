#!/usr/bin/env bash
# go-tests.sh: make test's Go tests, in two tracks at once.
#
# The kubeadm node's tests (one node per machine: kubeadmtest.Start holds a
# lock, so they run one after the other) spend most of their time waiting
# on kubelet, static pods and the apiserver's termination grace, not on the
# CPU. In one `go test ./...` they ran inside internal/test/e2e's binary,
# one after the other with that package's other tests, and that package
# was the last to finish (766 s of a cold run's 15 min of tests, of which
# about 330 s on the node). Here they run in their own `go test` beside
# everything else: the rest of ./... with them skipped, then the race
# detector's runs, scripts/e2e.sh and deploy/check.sh. Both tracks run to the end; the node's output is printed
# after the rest, and the exit status is non-zero when either failed.
#
# make test runs it with CGO_ENABLED=0 and its GOFLAGS (the Makefile's
# GO_BUILD_FLAGS say why); the race detector's runs need cgo.
#
# NODE_TESTS names the node's tests. A test that starts a node must match
# it (kubeadmtest's TestEveryNodeTestIsNamed fails otherwise), or it would
# run in both tracks at once.
set -uo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
read -r -a flags <<<"${GOTEST_FLAGS:--timeout 30m}"
NODE_TESTS='^(TestKubeadm|TestNode)'
# The node's track: a longer timeout (one binary runs every node test of
# its package, minutes each).
NODE_TIMEOUT=${NODE_TIMEOUT:-60m}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$GO" test -timeout "$NODE_TIMEOUT" -run "$NODE_TESTS" ./internal/test/e2e ./internal/test/kubeadmtest >"$log" 2>&1 &
node=$!

status=0
run() {
	"$@" || status=1
}
run "$GO" test "${flags[@]}" -skip "$NODE_TESTS" ./...
# The race detector on the code that splits work across goroutines: the
# file check's two walkers, the snapshot stream, save's sink and
# watchdog, the backup pipeline (spool tail, verifier, checksum, gate,
# store, member retry), the store readers, the repository's decoder,
# fetch stream and caches, restore's rollback, the notifier and the
# leader lock, capture's watch reader, flusher, compactor and pre-snapshot
# watch, replay's read-ahead and the repository's holds, the agent's copy
# job beside its schedules and the copy engine (about 4 minutes on 2 cores).
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestFile|TestStream|TestCRC|TestSave|TestTake' ./verify ./snapshot
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestSnapshot|TestPriority|TestShutdownDuringUpload|TestNotifier|TestStaleNotification|TestTwoAgentsOneLeader|TestLockExpires|TestCaptureWithoutLock|TestCaptureFollowsTheLock|TestAgentCopies' ./backup ./agent
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestDirStore|TestS3Store|TestS3ReadFaults' ./uploader
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" ./replica
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestOpenDetectsDamage|TestEncodingRoundTrip|TestReadAhead|TestTrailerHash|TestLastDrills|TestCache|TestListFailsOnStoreErrors|TestHold' ./repository
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestRestoreRollsBack|TestPointInTime$|TestReplay' ./restore
run env CGO_ENABLED=1 "$GO" test -race "${flags[@]}" -run 'TestCaptureWorkload|TestCaptureResumesAfterCut|TestCaptureBufferBounded|TestCaptureLockLost|TestHandle|TestCaptureCompacts|TestCaptureRollover|TestCaptureBornWhileCompacting' ./capture

# The end-to-end script (the built binary against the etcd binary) and
# the deploy checks, still beside the node.
run ./scripts/e2e.sh
run ./deploy/check.sh

wait "$node" || status=1
echo "=== the kubeadm node's tests ($NODE_TESTS)"
cat "$log"
exit "$status"
