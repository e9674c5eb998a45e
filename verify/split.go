package verify

import (
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"math/bits"
	"sync"
)

// A walk reads the pages of the key bucket in key order, which on a large
// etcd database is nearly random in the file: the walk costs one pread per
// leaf, a few microseconds each. Two walkers, each on half of the key
// bucket's tree, run on two cores; crc32 is combined (crcCombine), HashKV's
// per-key state merged (kvHasher.merge), page references checked across the
// halves. The result is the same Status the walk in one piece gives; the
// one case where it could differ (a record that compaction should have
// removed, straddling the halves) makes scan start again in one piece.

// splitMinPages is the smallest database (in pages) whose key bucket is
// walked in two halves; below it the second goroutine is not worth it.
const splitMinPages = 1 << 14

// keyWalk hashes the records of one bucket, or of a part of the key
// bucket: the bolt hash (a running crc, or one from zero for a part walked
// by the second walker, with its length) and, for the key bucket, HashKV.
type keyWalk struct {
	ctx     context.Context
	r       *reader
	bolt    uint32
	boltLen int64
	h       *kvHasher // nil outside the key bucket
	n       int
}

func (w *keyWalk) record(k, v []byte) {
	w.bolt = crc32.Update(w.bolt, castagnoli, k)
	w.bolt = crc32.Update(w.bolt, castagnoli, v)
	w.boltLen += int64(len(k) + len(v))
}

// visit is the visitFunc of a bucket's records.
func (w *keyWalk) visit(k, v, nested []byte, d int) error {
	if nested != nil {
		w.record(k, nil)
		return w.r.checkNested(0, nested, d+1)
	}
	w.record(k, v)
	if w.h != nil {
		if err := w.h.add(k, v); err != nil {
			return fmt.Errorf("%w: key bucket: %w", ErrCorrupt, err)
		}
	}
	if w.n++; w.n%ctxEvery == 0 {
		return w.ctx.Err()
	}
	return nil
}

// walkKeyBucket walks the key bucket whose header is v as walkBucket does,
// hashing with w. With split, on a large file whose key bucket's root is a
// branch, the second half of the root's children is walked by a second
// reader on its own goroutine, and the halves are merged. splitMin is
// scan's.
func (r *reader) walkKeyBucket(w *keyWalk, v []byte, depth int, splitMin uint64) error {
	if len(v) < bucketHeaderSize {
		return corruptf("page %d: bucket value of %d bytes", 0, len(v))
	}
	root := ne.Uint64(v)
	if splitMin == 0 || root == 0 || r.meta.pgid < splitMin {
		return r.walkBucket(0, v, depth, w.visit)
	}
	p, err := r.load(root, depth, true)
	if err != nil {
		return err
	}
	if p.flags != branchPage || p.count < 2 {
		_, err := r.walkPage(p, depth, nil, nil, w.visit)
		return err
	}
	half := p.count / 2

	ctx2, cancel := context.WithCancel(w.ctx)
	defer cancel()
	r2 := &reader{ctx: ctx2, f: r.f, meta: r.meta, seen: newBitmap(r.meta.pgid)}
	w2 := &keyWalk{ctx: ctx2, r: r2, h: w.h.segment()}
	p2 := p
	p2.b = bytes.Clone(p.b) // r's buffer for depth is not r2's
	var (
		wg   sync.WaitGroup
		err2 error
	)
	wg.Go(func() {
		defer func() {
			if x := recover(); x != nil {
				err2 = fmt.Errorf("%w: %w (%v)", ErrCorrupt, errInternal, x)
			}
		}()
		_, err2 = r2.walkBranch(p2, depth, nil, nil, half, p2.count, w2.visit)
	})
	last, err := r.walkBranch(p, depth, nil, nil, 0, half, w.visit)
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err != nil {
		return err
	}
	if err2 != nil {
		return err2
	}
	// What the walk in one piece checks at the seam: the first separator of
	// the second half against the largest key of the first.
	k, _, err := p.branchElem(half)
	if err != nil {
		return err
	}
	if err := keyOrder(p.id, half, k, last, nil); err != nil {
		return err
	}
	for i, b := range r2.seen {
		if both := r.seen[i] & b; both != 0 {
			return corruptf("page %d: multiple references", uint64(i)*64+uint64(bits.TrailingZeros64(both)))
		}
		r.seen[i] |= b
	}
	w.bolt = crcCombine(w.bolt, w2.bolt, w2.boltLen)
	w.boltLen += w2.boltLen
	return w.h.merge(w2.h)
}
