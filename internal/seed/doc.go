// Package seed writes Kubernetes-like data into etcd: keys under /registry
// laid out as the Kubernetes API server lays them out, values that compress
// like real objects, then updates, deletes and optionally a compaction, so
// that a snapshot of the result has history, tombstones and a compact
// revision like a real control plane's.
//
// Kubernetes is deterministic for a given Options.Seed: the same keys with
// the same values are live afterwards (revisions may differ, since writers
// run concurrently). It is used by tests, by `lifeboat demo` and by the
// benchmarks; it batches puts in transactions and writes concurrently so a
// gigabyte takes minutes, not hours.
//
// The package does not model Kubernetes semantics: values are opaque bytes
// that look like JSON objects, not decodable API objects.
package seed
