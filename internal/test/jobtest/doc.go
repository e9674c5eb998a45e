// Package jobtest holds the test fixtures the jobs (backup, retention/prune,
// restore's drill job) and the daemon that schedules them (agent) share: a
// real etcd seeded with Kubernetes-like data beside a store, synthetic
// backups written straight into a store, an S3 store on versitygw, a store
// that holds a backup between its data object and its manifest, and a
// logger whose output is shown when a test fails.
//
// It is imported only by tests. It fakes no server: etcd is
// internal/etcdtest, S3 is internal/s3test; the synthetic backups are real
// objects and manifests in a real store, just not of a real snapshot.
package jobtest
