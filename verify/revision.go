package verify

import (
	"context"
	"fmt"
	"os"
)

// Revision returns the revision of the snapshot at path: the revision of
// the last record of its key bucket, or the compact revision from the meta
// bucket when that is newer, which is what File reports as Status.Revision
// for a sound file; 0 when the key bucket is empty or absent and the file was
// never compacted. It reads one path down the key bucket's and the meta
// bucket's trees, a handful of pages,
// so a caller can ask the live member for its HashKV at that revision while
// File checks the whole file. It checks only what it reads: File is the
// check. Damage it meets wraps ErrCorrupt, as in File.
func Revision(ctx context.Context, path string) (rev int64, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open snapshot %s: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("stat snapshot %s: %w", path, err)
	}
	defer func() {
		if r := recover(); r != nil {
			rev, err = 0, fmt.Errorf("snapshot %s: %w: %w (%v)", path, ErrCorrupt, errInternal, r)
		}
	}()
	m, err := readMeta(f, fi.Size())
	if err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", path, err)
	}
	r := newReader(ctx, f, m)
	if rev, err = r.lastRevision(); err != nil {
		return 0, fmt.Errorf("snapshot %s: key bucket: %w", path, err)
	}
	compact, err := r.compactRevision()
	if err != nil {
		return 0, fmt.Errorf("snapshot %s: %w", path, err)
	}
	return max(rev, compact), nil
}

// compactRevision is the newer of the finished and scheduled compact
// revisions of the meta bucket, 0 without one (see File's Revision).
func (r *reader) compactRevision() (int64, error) {
	rootVal := make([]byte, bucketHeaderSize)
	ne.PutUint64(rootVal, r.meta.root)
	metaVal, isBucket, err := r.lookup(rootVal, metaBucket, 0)
	if err != nil {
		return 0, fmt.Errorf("meta bucket: %w", err)
	}
	if metaVal == nil || !isBucket {
		return 0, nil
	}
	finished, err := r.metaRevision(metaVal, finishedCompact)
	if err != nil {
		return 0, err
	}
	scheduled, err := r.metaRevision(metaVal, scheduledCompact)
	if err != nil {
		return 0, err
	}
	return max(finished, scheduled), nil
}

// lastRevision follows the rightmost path of the key bucket's tree to its
// last record.
func (r *reader) lastRevision() (int64, error) {
	rootVal := make([]byte, bucketHeaderSize)
	ne.PutUint64(rootVal, r.meta.root)
	keyVal, isBucket, err := r.lookup(rootVal, keyBucket, 0)
	if err != nil {
		return 0, err
	}
	if keyVal == nil || !isBucket {
		return 0, nil
	}
	if len(keyVal) < bucketHeaderSize {
		return 0, corruptf("bucket value of %d bytes", len(keyVal))
	}
	r.visited = newBitmap(r.meta.pgid)
	var p page
	if root := ne.Uint64(keyVal); root == 0 {
		p, err = inlinePage(0, keyVal)
	} else {
		p, err = r.load(root, 0, false)
	}
	for depth := 0; err == nil && p.flags == branchPage; depth++ {
		if p.count == 0 {
			return 0, corruptf("page %d: empty branch page", p.id)
		}
		var child uint64
		if _, child, err = p.branchElem(p.count - 1); err == nil {
			p, err = r.load(child, depth+1, false)
		}
	}
	if err != nil {
		return 0, err
	}
	if p.flags != leafPage {
		return 0, corruptf("page %d: type %#x is not a branch or leaf page", p.id, p.flags)
	}
	for i := p.count - 1; i >= 0; i-- {
		k, _, bucket, err := p.leafElem(i)
		if err != nil {
			return 0, err
		}
		if bucket {
			continue
		}
		rv, err := parseRevKey(k)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return rv.main, nil
	}
	return 0, nil
}
