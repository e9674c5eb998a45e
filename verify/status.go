package verify

import (
	"errors"
	"fmt"
)

// ErrCorrupt is wrapped by every integrity failure: a missing or wrong
// sha256 trailer, a file bbolt cannot open, bbolt structural check errors,
// damaged pages, and records in etcd's buckets that cannot be parsed.
var ErrCorrupt = errors.New("snapshot is corrupt")

// ErrHashKVMismatch is wrapped by CompareHashKV when a snapshot's HashKV
// differs from the live member's at the same revision and compact revision.
var ErrHashKVMismatch = errors.New("hashkv mismatch")

// ErrManifestMismatch is wrapped when a backup's content disagrees with
// what its manifest recorded (callers that compare Status with a manifest
// use it).
var ErrManifestMismatch = errors.New("backup does not match its manifest")

// Status is what File learns about a snapshot. The fields that etcdutl
// reports carry the same values as `etcdutl snapshot status`.
type Status struct {
	// Size is the size of the bbolt database in bytes (tx.Size(), etcdutl's
	// totalSize): without etcd's sha256 trailer.
	Size int64
	// Revision is the revision of the data: the newest revision in the key
	// bucket (etcdutl's revision), or the compact revision when that is
	// newer (etcd before 3.5.16 compacted away a tombstone that was the
	// newest record; etcd restored from the file starts at the compact
	// revision too). 0 if the key bucket is empty and never compacted.
	Revision int64
	// CompactRevision is the finished compact revision from the meta bucket,
	// 0 if the keyspace was never compacted.
	CompactRevision int64
	// TotalKeys is the number of keys alive at Revision, as etcd's index
	// holds them: with EmptyKey, one of them is the empty key.
	TotalKeys int
	// EmptyKey: the empty key is alive. etcdutl's revision bump (restore
	// --bump-revision, which Kubernetes restores use) writes a record
	// without a key at the bumped revision; etcd indexes it as the empty
	// key and keeps it, but no range returns it. A count of keys through
	// etcd's API (from "\x00") is TotalKeys - 1 then.
	EmptyKey bool
	// BoltHash is the crc32 (Castagnoli) over every bucket name, key and
	// value: etcdutl's "hash".
	BoltHash uint32
	// StorageVersion is etcd's storage version from the meta bucket (etcdutl's
	// "version"), "" if absent (etcd before v3.6).
	StorageVersion string
	// HashKV is etcd's HashKV at Revision computed from the file: what a
	// member holding this data answers to HashKV(Revision) while its compact
	// revision is CompactRevision. It is 0 when HashKVComparable is false.
	HashKV uint32
	// HashKVComparable is false when the file cannot give a HashKV equal to
	// what a live member would answer (a compaction scheduled but not
	// finished, an empty key bucket); HashKVReason then says why.
	HashKVComparable bool
	// HashKVReason says why HashKVComparable is false; empty otherwise.
	HashKVReason string
}

// CompareHashKV compares a snapshot's HashKV with the live member's answer
// for HashKV at st.Revision (liveHash, and the compact revision the member
// reported with it; etcd's -1 for "never compacted" equals 0).
//
// It returns "match" when both are comparable and equal, and "not
// comparable: <why>" with a nil error when the compact revisions differ
// (etcd skips revisions scheduled for deletion and hashes a tombstone at
// the compact revision differently, so hashes over different compactions
// differ legitimately) or when st.HashKVComparable is false. The compact
// revisions differ, in particular, when st.Revision is the compact revision
// itself: etcd then answers with the hash it computed while compacting, over
// the records before compaction, reported with the previous compact
// revision. When they are
// comparable and differ it returns an error wrapping ErrHashKVMismatch.
// It assumes the member hashes by File's rules: with a live member of any
// version, use CompareMemberHashKV.
func CompareHashKV(st Status, liveHash uint32, liveCompactRev int64) (string, error) {
	if !st.HashKVComparable {
		return "not comparable: " + st.HashKVReason, nil
	}
	if liveCompactRev < 0 {
		liveCompactRev = 0 // etcd reports -1 before its first compaction
	}
	if liveCompactRev != st.CompactRevision {
		return fmt.Sprintf("not comparable: member compact revision %d, snapshot compact revision %d",
			liveCompactRev, st.CompactRevision), nil
	}
	if liveHash != st.HashKV {
		return "", fmt.Errorf("%w at revision %d (compact revision %d): snapshot 0x%08x, member 0x%08x",
			ErrHashKVMismatch, st.Revision, st.CompactRevision, st.HashKV, liveHash)
	}
	return "match", nil
}

// ServedKeys is the number of keys a range over etcd's API returns
// (TotalKeys without the empty key).
func (st Status) ServedKeys() int {
	if st.EmptyKey {
		return st.TotalKeys - 1
	}
	return st.TotalKeys
}
