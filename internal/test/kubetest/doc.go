// Package kubetest runs a real kube-apiserver for tests, as the writer of
// Kubernetes data into etcd, and talks to it.
//
// Start runs the kube-apiserver binary (built by `make tools` with
// scripts/build-kube.sh into .bin/kube-apiserver, or named by
// KUBE_APISERVER_BIN) as a child process against the etcd client URLs it is
// given, on a free loopback port, with what a single test server needs and
// nothing more: a generated serving certificate and service-account key
// pair, a static bearer token (AlwaysAllow authorization), no endpoint
// reconciler, certificates and keys in a 0700 directory and, optionally, an
// EncryptionConfiguration (AESCBCConfig writes one for Secrets). It waits for
// /readyz and stops the server at test cleanup (SIGTERM, SIGKILL when it does
// not end in time). Under CI=true a missing binary fails the test; without
// CI the test is skipped with a message that says how to build it.
//
// Client makes plain JSON requests over HTTPS with the token: create, get,
// list and delete of namespaced and cluster objects (Resource names the
// ones the tests use: namespaces, ConfigMaps, Secrets, Deployments, CRDs
// and their instances), and DeleteNamespace, which does what the namespace
// controller (not running: there is no kube-controller-manager) would do.
// The builders (NewNamespace, NewConfigMap, NewSecret, NewDeployment,
// NewCRD, NewCustom) make minimal valid objects.
//
// The package is meant to be imported only by tests. It does not run
// kube-controller-manager, a scheduler or kubelets, it does not depend on
// client-go (k8s.io modules stay out of go.mod), and it does not start etcd:
// internal/etcdtest does.
package kubetest
