// Package uploader is lifeboat's backup store: the Store interface with its
// local-directory (Dir) and S3-compatible (S3) implementations, the encoding
// of snapshots into stored objects (zstd, then age encryption), the
// versioned manifest that commits a backup, and the layout of a cluster's
// backups inside a store (Backups).
//
// It does not talk to etcd and does not check snapshot contents: the
// snapshot and verify packages do. It never decides what to keep: the
// retention package does.
//
// The commit protocol: the data object is written first (Put makes it
// visible only once complete), the manifest last. A data object without a
// manifest is an orphan, never a backup. Stores create objects and never
// replace them (Put fails with ErrExists), so two writers of one backup id
// cannot both succeed.
package uploader
