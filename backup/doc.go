// Package backup takes one backup of an etcd cluster: take a snapshot from
// a member, verify it, encode it, store it, then commit it with its
// manifest. Run is that pipeline, for the CLI's lifeboat snapshot and the
// agent's scheduled snapshot job alike.
//
// Run dials one etcd session for the job (snapshot.Dial) and passes it to
// every attempt and every step: member status, the stream, the live
// HashKV. The steps overlap: the stream from etcd goes to a spool file
// without a name (snapshot.CreateSpool), and a second goroutine, on an OS
// thread of lower priority, follows the file through the encoder (zstd,
// age) into the store while the stream still runs. The store sees the
// object's end only once the spool file has passed verify.File and the
// live member's HashKV comparison and the bytes fed to the encoder are the
// bytes verified (crc32c); otherwise the upload is aborted. The manifest
// is written last: a backup exists only once it is. A stream that breaks
// off mid-way is retried from the next member; Run never retries a backup
// that failed for another reason (the agent schedules retries).
//
// It owns the order of the steps and what a manifest records, not the
// steps: the etcd session, stream and spool are the snapshot package's,
// the file checks verify's, encoding, manifests and the store layout
// repository's, the bytes in the store uploader's. It does not schedule,
// retry after a failure, count metrics or prune; the agent and
// retention/prune do.
package backup
