// Package uploader is lifeboat's byte store: the Store interface with its
// local-directory (Dir) and S3-compatible (S3) implementations, and the
// shared test suite both pass (storetest). Bytes in, bytes out.
//
// It does not know what the bytes are: the layout of a cluster's backups,
// ids, manifests, drill reports and the encoding of snapshots (zstd, age)
// belong to the repository package. It does not talk to etcd and does not
// check snapshot contents (snapshot and verify do), and it never decides
// what to keep (retention does).
//
// What the repository's commit protocol needs from a store: Put makes an
// object visible only once complete, and stores create objects and never
// replace them (Put fails with ErrExists), so two writers of one key
// cannot both succeed.
package uploader
