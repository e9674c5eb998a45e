package verify

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/coreos/go-semver/semver"
)

// Bucket and meta key names of etcd's schema (go.etcd.io/etcd/server/v3/storage/schema).
var (
	keyBucket         = []byte("key")
	metaBucket        = []byte("meta")
	storageVersionKey = []byte("storageVersion")
	finishedCompact   = []byte("finishedCompactRev")
	scheduledCompact  = []byte("scheduledCompactRev")
)

// castagnoli is the crc32 table etcd uses for its hashes.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

const (
	// ctxEvery is how many records are read between context checks.
	ctxEvery = 4096
)

// errInternal marks a panic while reading a file: a bug in this package,
// reported as corruption so that no damaged file can crash lifeboat.
var errInternal = errors.New("unexpected failure reading the file")

// File checks the snapshot at path read-only and returns its status: the
// structural checks of bbolt's tx.Check, the fields of `etcdutl snapshot
// status` (size, revision, total keys, bolt hash, storage version), the
// compact revision and etcd's HashKV at the snapshot revision.
//
// The file may carry etcd's sha256 trailer (bbolt ignores bytes past its
// pages); File does not check it, Trailer does. The file must not change
// while File runs. Integrity failures wrap ErrCorrupt; a missing or
// unreadable file is an error naming the path, not ErrCorrupt.
//
// File reads the file with pread into small buffers, not through a memory
// map, so its resident memory stays small whatever the file's size: a 1 MiB
// read-ahead window, page buffers, a bitmap of one bit per page and a map
// of about 30 bytes per key (some 10 MiB for 250k keys). It reads every page
// once, plus the pages holding records newer than the compact revision a
// second time. On a large file (64 MiB or more) the key bucket is read by
// two goroutines, each with its own buffers, on half of its tree (see
// walkKeyBucket): the result is the same. ctx is checked every few thousand
// pages and records.
func File(ctx context.Context, path string) (st Status, err error) {
	return file(ctx, path, splitMinPages, nil)
}

// Records receives the records of the key bucket while File reads them,
// so that another pass over the file (an index of its keys, say) needs no
// second read. Walker is called once for each walker of the key bucket
// (one, or two side by side on a large file) before it reads a record; the
// function it returns gets that walker's records in revision order, from
// one goroutine, with slices valid only during the call. An error it
// returns ends File with that error (wrapped). Restart says that the
// walk starts again in one piece: every record received so far is to be
// forgotten.
type Records interface {
	Walker() func(revKey, kv []byte) error
	Restart()
}

// FileRecords is File, handing every record of the key bucket to rec as
// it is checked.
func FileRecords(ctx context.Context, path string, rec Records) (st Status, err error) {
	return file(ctx, path, splitMinPages, rec)
}

func file(ctx context.Context, path string, splitMin uint64, rec Records) (st Status, err error) {
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return Status{}, fmt.Errorf("open snapshot %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Status{}, fmt.Errorf("stat snapshot %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return Status{}, fmt.Errorf("snapshot %s: not a regular file", path)
	}
	defer func() {
		if r := recover(); r != nil {
			st, err = Status{}, fmt.Errorf("snapshot %s: %w: %w (%v)", path, ErrCorrupt, errInternal, r)
		}
	}()
	m, err := readMeta(f, fi.Size())
	if err != nil {
		return Status{}, fmt.Errorf("snapshot %s: %w", path, err)
	}
	st, err = scan(ctx, newReader(ctx, f, m), splitMin, rec)
	if errors.Is(err, errSequential) {
		if rec != nil {
			rec.Restart()
		}
		st, err = scan(ctx, newReader(ctx, f, m), 0, rec)
	}
	if err != nil {
		return Status{}, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return st, nil
}

// scan reads the meta bucket and the records newer than the compact
// revision, then walks the whole file once, checking it and hashing every
// bucket and record. A key bucket in a database of splitMin pages or more
// (0: never) is walked in two halves side by side (see walkKeyBucket).
func scan(ctx context.Context, r *reader, splitMin uint64, rec Records) (Status, error) {
	st := Status{Size: int64(r.meta.pgid * r.meta.pageSize)}
	rootVal := make([]byte, bucketHeaderSize)
	ne.PutUint64(rootVal, r.meta.root)

	scheduled, err := r.readMetaBucket(rootVal, &st)
	if err != nil {
		return Status{}, err
	}
	h, err := r.kvHasher(ctx, rootVal, st.CompactRevision, scheduled, splitMin)
	if err != nil {
		return Status{}, err
	}
	boltHash, err := r.walkRoot(ctx, h, rec, splitMin)
	if err != nil {
		return Status{}, err
	}
	if err := r.checkFreelist(); err != nil {
		return Status{}, err
	}
	st.BoltHash = boltHash
	// As etcd's store on this file (mvcc store.restore): etcd before
	// 3.5.16 removes a tombstone at the compact revision, so the newest
	// record may be older than the compaction.
	st.Revision = max(h.revision(), st.CompactRevision, scheduled)
	st.TotalKeys, st.EmptyKey = h.liveKeys(), h.emptyKeyAlive()
	st.HashKV, st.HashKVComparable, st.HashKVReason = h.sum()
	return st, nil
}

// readMetaBucket sets the storage version and the finished compact
// revision of st from the meta bucket, and returns the scheduled compact
// revision (all 0 or "" when absent).
func (r *reader) readMetaBucket(rootVal []byte, st *Status) (scheduled int64, err error) {
	metaVal, isBucket, err := r.lookup(rootVal, metaBucket, 0)
	if err != nil {
		return 0, fmt.Errorf("meta bucket: %w", err)
	}
	if metaVal == nil || !isBucket {
		return 0, nil
	}
	v, _, err := r.lookup(metaVal, storageVersionKey, 0)
	if err != nil {
		return 0, fmt.Errorf("meta bucket: %w", err)
	}
	// As etcdutl: the value as semver, "" when absent or not semver.
	if sv, err := semver.NewVersion(string(v)); v != nil && err == nil {
		st.StorageVersion = sv.String()
	}
	if st.CompactRevision, err = r.metaRevision(metaVal, finishedCompact); err != nil {
		return 0, err
	}
	return r.metaRevision(metaVal, scheduledCompact)
}

// kvHasher makes the HashKV hasher for a file compacted to compact (with
// a compaction to scheduled begun) and, when it needs them, reads the
// records newer than the compact revision into it first.
func (r *reader) kvHasher(ctx context.Context, rootVal []byte, compact, scheduled int64, splitMin uint64) (*kvHasher, error) {
	h := newKVHasher(compact)
	if scheduled > compact {
		h.notComparable(fmt.Sprintf("compaction to revision %d scheduled but only %d finished", scheduled, compact))
	}
	if !h.needTail() {
		return h, nil
	}
	keyVal, isBucket, err := r.lookup(rootVal, keyBucket, 0)
	if err != nil {
		return nil, fmt.Errorf("key bucket: %w", err)
	}
	if keyVal != nil && isBucket {
		if err := h.readTail(ctx, r, keyVal, splitMin); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// walkRoot walks every bucket of the file once, checking it, handing the
// key bucket's records to h (and rec), and returns the bolt hash. The
// root bucket holds only buckets: hash each name, then its records in
// order, as etcdutl's status does (nested buckets by name only).
func (r *reader) walkRoot(ctx context.Context, h *kvHasher, rec Records, splitMin uint64) (uint32, error) {
	var boltHash uint32
	root := func(name, v, bucketVal []byte, depth int) error {
		if bucketVal == nil {
			return corruptf("root entry %q is not a bucket", name)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		boltHash = crc32.Update(boltHash, castagnoli, name)
		w := &keyWalk{ctx: ctx, r: r, bolt: boltHash}
		var err error
		if bytes.Equal(name, keyBucket) {
			w.h, w.rec = h, rec
			err = r.walkKeyBucket(w, bucketVal, depth+1, splitMin)
		} else {
			err = r.walkBucket(0, bucketVal, depth+1, w.visit)
		}
		boltHash = w.bolt
		return err
	}
	if _, err := r.walkTree(r.meta.root, 0, nil, nil, root); err != nil {
		return 0, err
	}
	return boltHash, nil
}

// metaRevision reads a compact revision from the meta bucket, 0 if absent.
func (r *reader) metaRevision(metaVal, name []byte) (int64, error) {
	v, _, err := r.lookup(metaVal, name, 0)
	if err != nil {
		return 0, fmt.Errorf("meta bucket: %w", err)
	}
	if v == nil {
		return 0, nil
	}
	rev, err := parseRevKey(v)
	if err != nil {
		return 0, fmt.Errorf("%w: meta %s: %w", ErrCorrupt, name, err)
	}
	return rev.main, nil
}
