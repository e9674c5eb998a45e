package verify

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/maphash"
)

// kvHasher recomputes etcd's HashKV (mvcc hashByRev / kvHasher in
// go.etcd.io/etcd/server/v3/storage/mvcc, v3.7; the same in 3.5 and 3.6) at
// the newest revision R of a snapshot, with compact revision C, from the
// key bucket alone (R is C when the bucket ends below C: see sum).
//
// etcd hashes "key", then the key and value of each revision record in
// order, skipping:
//   - records newer than R (there are none: R is the newest);
//   - records at or below C that are not in keep, where keep holds, for
//     every key alive at R, its newest revision at or below R. This rule
//     only applies when keep is not empty (some key is alive at R);
//   - a tombstone at exactly C.
//
// After a finished compaction the bucket holds at most one record at or
// below C per key (the newest; compaction removed the others, and all
// tombstones below C). Such a record is then in keep exactly when it is not
// a tombstone and its key has no record newer than C. kvHasher learns those
// keys with a read of the records after C (readTail) before the main pass.
// Whether keep is empty is only known at the end, so until a record in keep
// is seen a second crc is kept for the unfiltered case.
//
// Keys are remembered as 128-bit hashes (two seeded maphashes), 16 bytes a
// key: a collision between two of a few million keys has a probability
// below 1e-25.
type kvHasher struct {
	compact  int64
	rev      int64  // newest revision so far
	filtered uint32 // crc when keep is not empty
	all      uint32 // crc when keep is empty; frozen once keepSeen
	keepSeen bool
	seeds    [2]maphash.Seed
	keys     map[keyID]keyState
	live     int    // keys alive so far, in revision order (etcdutl's count)
	tail     bool   // keys have been marked changedAfterCompact
	reason   string // why the result is not comparable; "" if it is

	// A segment hasher (see segment) hashes a later part of the bucket
	// from empty crcs; the lengths let merge combine them.
	seg         bool
	filteredLen int64
	allLen      int64
}

// keyState is what kvHasher knows of a key.
type keyState uint8

const (
	alive               keyState = 1 << iota // its newest record so far is a put
	changedAfterCompact                      // it has a record newer than the compact revision
	segSeen                                  // a segment hasher met a record of it
	segFirstLow                              // ... and the first was at or below the compact revision
)

// newKVHasher returns a hasher for compact revision compact. Its key map
// starts empty and grows with the keys met: a size hint from the file (a
// key per page) overshot the keys of the 2 GB bench database 2.7 times and
// made the walk's memory grow with the file, while Go's maps grow a table
// at a time, for a few milliseconds of CPU per 100 000 keys.
func newKVHasher(compact int64) *kvHasher {
	h := &kvHasher{
		compact: compact,
		seeds:   [2]maphash.Seed{maphash.MakeSeed(), maphash.MakeSeed()},
		keys:    make(map[keyID]keyState),
	}
	h.filtered = crc32.Update(0, castagnoli, keyBucket)
	h.all = h.filtered
	return h
}

func (h *kvHasher) notComparable(reason string) {
	if h.reason == "" {
		h.reason = reason
	}
}

// needTail says whether the hash needs the keys changed after compact.
func (h *kvHasher) needTail() bool {
	return h.compact > 0 && h.reason == ""
}

// readTail reads the records newer than the compact revision from the key
// bucket whose header is keyVal. In a database of splitMin pages or more
// (0: never) two readers share the work, as in walkKeyBucket.
func (h *kvHasher) readTail(ctx context.Context, r *reader, keyVal []byte, splitMin uint64) error {
	h.tail = true
	from := revKey(h.compact + 1)
	// mark marks the key of each record in h.keys, or with ids (a second
	// reader, on another goroutine) collects it for marking afterwards.
	mark := func(ids *[]keyID) func(k, v []byte) error {
		n := 0
		return func(k, v []byte) error {
			key, err := kvKey(v)
			if err != nil {
				return fmt.Errorf("%w: key bucket: record %x: %w", ErrCorrupt, k, err)
			}
			if ids != nil {
				*ids = append(*ids, h.id(key))
			} else {
				h.keys[h.id(key)] |= changedAfterCompact
			}
			if n++; n%ctxEvery == 0 {
				return ctx.Err()
			}
			return nil
		}
	}
	var theirs []keyID
	defer func() {
		for _, id := range theirs {
			h.keys[id] |= changedAfterCompact
		}
	}()
	if len(keyVal) < bucketHeaderSize || ne.Uint64(keyVal) == 0 || splitMin == 0 || r.meta.pgid < splitMin {
		return r.scanFrom(keyVal, from, 0, mark(nil))
	}
	r.visited = newBitmap(r.meta.pgid)
	p, err := r.load(ne.Uint64(keyVal), 0, false)
	if err != nil {
		return err
	}
	lo := 0
	if p.flags == branchPage {
		lo = firstChildFrom(p, from)
	}
	if p.flags != branchPage || p.count-lo < 2 {
		return r.scanPage(p, from, 0, mark(nil))
	}
	half := lo + (p.count-lo)/2
	return r.sideBySide(ctx, p, func() error {
		return r.scanBranch(p, from, 0, lo, half, mark(nil))
	}, func(r2 *reader, p2 page) error {
		return r2.scanBranch(p2, from, 0, half, p2.count, mark(&theirs))
	})
}

// add takes the records of the key bucket in order.
func (h *kvHasher) add(k, v []byte) error {
	r, err := parseRevKey(k)
	if err != nil {
		return err
	}
	key, err := kvKey(v)
	if err != nil {
		return fmt.Errorf("record %x: %w", k, err)
	}
	id := h.id(key)
	state := h.keys[id]
	if h.seg && state&segSeen == 0 {
		state |= segSeen
		if h.compact > 0 && r.main <= h.compact {
			state |= segFirstLow
		}
		h.keys[id] = state
	}
	wasLive := state&alive != 0
	switch {
	case r.tombstone && wasLive:
		h.live--
		if state &^= alive; state == 0 {
			delete(h.keys, id)
		} else {
			h.keys[id] = state
		}
	case !r.tombstone && !wasLive:
		h.live++
		h.keys[id] = state | alive
	}
	// Records come in revision order: the last one is the snapshot revision,
	// so none is newer than the revision hashed.
	h.rev = r.main
	if h.compact > 0 && r.main <= h.compact {
		if wasLive || (r.tombstone && r.main < h.compact) {
			h.notComparable(fmt.Sprintf("key bucket holds revision %d of a key that compaction to %d should have removed", r.main, h.compact))
		}
		if r.tombstone && r.main == h.compact {
			return nil
		}
		if !r.tombstone && h.tail && state&changedAfterCompact == 0 {
			h.hashFiltered(k, v)
			if !h.keepSeen {
				h.hashAll(k, v)
				h.keepSeen = true
			}
			return nil
		}
		if !h.keepSeen {
			h.hashAll(k, v)
		}
		return nil
	}
	h.hashFiltered(k, v)
	if !h.keepSeen {
		h.hashAll(k, v)
	}
	return nil
}

func (h *kvHasher) hashFiltered(k, v []byte) {
	h.filtered = crc32.Update(crc32.Update(h.filtered, castagnoli, k), castagnoli, v)
	h.filteredLen += int64(len(k) + len(v))
}

func (h *kvHasher) hashAll(k, v []byte) {
	h.all = crc32.Update(crc32.Update(h.all, castagnoli, k), castagnoli, v)
	h.allLen += int64(len(k) + len(v))
}

// segment returns a hasher for a later part of the key bucket, to run
// side by side with h on the part before it: it starts from empty crcs,
// knows the keys readTail marked, and remembers every key it meets. Call it
// before h hashes anything more.
func (h *kvHasher) segment() *kvHasher {
	s := &kvHasher{compact: h.compact, seeds: h.seeds, tail: h.tail, seg: true, keys: make(map[keyID]keyState)}
	for id, st := range h.keys {
		if st&changedAfterCompact != 0 {
			s.keys[id] = changedAfterCompact
		}
	}
	return s
}

// errSequential says a split walk met a case only a walk in one piece
// reports exactly (a record compaction should have removed, straddling the
// split): the caller walks again in one piece.
var errSequential = errors.New("walk the key bucket in one piece")

// merge adds s, the segment hasher of the records after those h hashed,
// to h: the result is what h would hold had it hashed them itself.
func (h *kvHasher) merge(s *kvHasher) error {
	for id, st := range s.keys {
		if st&segSeen == 0 {
			continue // only readTail's mark
		}
		if h.keys[id]&alive != 0 {
			if st&segFirstLow != 0 && h.reason == "" {
				return errSequential
			}
			h.live--
		}
		if st&alive != 0 {
			h.live++
		}
	}
	h.filtered = crcCombine(h.filtered, s.filtered, s.filteredLen)
	h.filteredLen += s.filteredLen
	if !h.keepSeen { // else all is final already
		h.all = crcCombine(h.all, s.all, s.allLen)
		h.allLen += s.allLen
		h.keepSeen = s.keepSeen
	}
	if s.rev != 0 {
		h.rev = s.rev
	}
	h.notComparable(s.reason)
	return nil
}

func (h *kvHasher) id(key []byte) keyID {
	var id keyID
	binary.LittleEndian.PutUint64(id[:8], maphash.Bytes(h.seeds[0], key))
	binary.LittleEndian.PutUint64(id[8:], maphash.Bytes(h.seeds[1], key))
	return id
}

func (h *kvHasher) liveKeys() int { return h.live }

// emptyKeyAlive reports whether the empty key (etcdutl's revision-bump
// marker) is alive.
func (h *kvHasher) emptyKeyAlive() bool { return h.keys[h.id(nil)]&alive != 0 }

// revision is the newest revision of the key bucket (etcdutl's revision).
func (h *kvHasher) revision() int64 { return h.rev }

// sum returns the HashKV, or 0 and the reason it is not comparable.
func (h *kvHasher) sum() (uint32, bool, string) {
	// etcd before 3.5.16 (and 3.4.34) removes a tombstone at the compact
	// revision: when it was the newest record, the bucket ends below the
	// compact revision, and etcd's store starts at the compact revision.
	// etcd's HashKV there hashes what the bucket holds, by the same rules.
	if max(h.rev, h.compact) == 0 {
		// etcd's HashKV at revision 0 means "at the current revision".
		h.notComparable("the key bucket is empty: no revision to compare at")
	}
	if h.reason != "" {
		return 0, false, h.reason
	}
	if h.live > 0 {
		return h.filtered, true, ""
	}
	return h.all, true, ""
}

// keyID identifies a key by two independent 64-bit hashes. It is bytes,
// not two uint64s, so that a map slot (keyID and keyState) takes 17 bytes
// instead of 24 with the alignment padding: the map is the one part of a
// walk that grows with the database (a key each).
type keyID [16]byte
