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
	rec     Records   // nil: nobody else reads the key bucket's records
	sink    func(k, v []byte) error
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
		if w.rec != nil {
			if w.sink == nil {
				w.sink = w.rec.Walker()
			}
			if err := w.sink(k, v); err != nil {
				return err
			}
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
	// The second half's hasher copies what readTail marked now, before the
	// first half changes h.
	h2 := w.h.segment()
	var w2 *keyWalk
	var last []byte
	err = r.sideBySide(w.ctx, p, func() (err error) {
		last, err = r.walkBranch(p, depth, nil, nil, 0, half, w.visit)
		return err
	}, func(r2 *reader, p2 page) error {
		w2 = &keyWalk{ctx: r2.ctx, r: r2, h: h2, rec: w.rec}
		_, err := r2.walkBranch(p2, depth, nil, nil, half, p2.count, w2.visit)
		return err
	})
	if err != nil {
		return err
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
	w.bolt = crcCombine(w.bolt, w2.bolt, w2.boltLen)
	w.boltLen += w2.boltLen
	return w.h.merge(w2.h)
}

// sideBySide runs first on r and second on a new reader of the same file
// (its own buffers and page bitmaps, a copy of branch page p) on another
// goroutine, and returns the first error; when both succeed it adds the
// second reader's page bitmaps to r's, failing on a page both referenced.
func (r *reader) sideBySide(ctx context.Context, p page, first func() error, second func(r2 *reader, p2 page) error) error {
	ctx2, cancel := context.WithCancel(ctx)
	defer cancel()
	r2 := &reader{ctx: ctx2, f: r.f, meta: r.meta, seen: newBitmap(r.meta.pgid), visited: newBitmap(r.meta.pgid)}
	p2 := p
	p2.b = bytes.Clone(p.b) // r's buffer for this depth is not r2's
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
		err2 = second(r2, p2)
	})
	err := first()
	if err != nil {
		cancel()
	}
	wg.Wait()
	if err == nil {
		err = err2
	}
	if err != nil {
		return err
	}
	if err := addPages(r.seen, r2.seen); err != nil {
		return err
	}
	if r.visited != nil {
		return addPages(r.visited, r2.visited)
	}
	return nil
}

// addPages adds the pages of b to a, failing on a page in both.
func addPages(a, b bitmap) error {
	for i, w := range b {
		if both := a[i] & w; both != 0 {
			return corruptf("page %d: multiple references", uint64(i)*64+uint64(bits.TrailingZeros64(both)))
		}
		a[i] |= w
	}
	return nil
}
