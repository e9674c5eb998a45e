// Package e2e holds end-to-end tests that run the built lifeboat binary
// (LIFEBOAT_BIN) against real servers together: etcd (in-process and the
// etcd binary), `lifeboat agent` capturing changes, kube-apiserver as the
// writer (internal/kubetest) and the stores. Each test follows what an
// operator does, command by command, and checks the result through the
// Kubernetes API.
//
// It has no code outside its tests and is imported by nothing. The parts
// are tested in their own packages; this package owns only the paths
// through all of them (snapshot, capture, delete, find the revision in
// the log, restore to a backup or a point in time, boot, read back) and
// the refusals of bad targets.
package e2e
