// Package inspect looks inside stored backups without restoring them: it
// lists the keys of a backup's snapshot, reads one key's value as it was,
// and compares two backups, decoding Kubernetes objects on the way.
//
// A backup is fetched once into a local Cache (checked against its
// manifest's sha256 and the snapshot's checks, as `lifeboat fetch` does),
// indexed once, and served from disk afterwards: the index holds every live
// key at the snapshot's revision (the newest record of each key in etcd's
// key bucket that is not a tombstone) with the revision key of that record,
// so a get reads a binary search of the index and one path of the bbolt
// tree, and a listing reads the index only. The snapshot is read with
// verify.Keys (pread, page by page, no memory map): memory stays a few
// buffers whatever the database's size. A cached copy is re-verified on
// reuse: cheaply by its sidecar (size, modification time, sha256), fully
// (sha256 recomputed) when the sidecar is missing or stale, and fetched
// again when it does not match.
//
// Values: protobuf objects in kube-apiserver's k8s\0 envelope are decoded
// with the Kubernetes scheme (k8s.io/api), built on first use so that a
// process that never decodes (the agent) never pays for it; JSON values
// pass through; anything else is raw. Values encrypted at rest by
// kube-apiserver (aescbc, aesgcm, secretbox) are decrypted with the keys
// of an EncryptionConfiguration; KMS values cannot be decrypted offline and
// say so per value.
//
// The package does not restore (restore does), does not replay captured
// changes onto a snapshot (points in time: restore's replay), and does not
// write to the store.
package inspect
