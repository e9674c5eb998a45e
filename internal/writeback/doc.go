// Package writeback writes files in a way that is gentle on a disk shared with
// a latency-sensitive process such as etcd.
//
// A plain sequential write of a large file leaves hundreds of megabytes of dirty
// pages in the page cache; the kernel then flushes them in bursts and the final
// fsync blocks for seconds, during which etcd's WAL fsyncs queue behind it (the
// p99 put latency spikes seen while etcdctl snapshot save runs). Writer starts
// writeback of every chunk as soon as it is complete and waits for the chunk
// before the previous one, so dirty pages stay bounded by about three chunks,
// the disk sees a steady stream instead of bursts, and the final fsync is
// small: the bytes_per_sync idea of RocksDB.
//
// The package also provides lifeboat's one atomic file write: the temp-file,
// fsync, rename (or hard link, to never replace a file), fsync-directory
// sequence (WriteFileAtomic, CommitFile, SyncDir) used wherever a file must
// appear whole or not at all: the directory store's objects, fetched
// snapshots, the metrics textfile. It does not rate-limit writes and does
// not use O_DIRECT.
package writeback
