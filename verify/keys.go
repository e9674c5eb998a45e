package verify

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Keys reads the records of a snapshot's key bucket (mvcc revision key →
// marshalled mvccpb.KeyValue) with pread, page by page, as File does: a
// lookup reads one path down the tree, a scan reads each page once, and
// nothing is memory-mapped, so the process's RSS stays a few buffers
// whatever the file's size. It checks only what it reads (bounds, page
// types, references): File is the check. Damage wraps ErrCorrupt and never
// panics. A Keys is not safe for concurrent use.
type Keys struct {
	path   string
	f      *os.File
	r      *reader
	bucket []byte // the key bucket's header, nil when the bucket is absent
}

// OpenKeys opens the snapshot at path read-only for Keys' lookups.
func OpenKeys(ctx context.Context, path string) (k *Keys, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open snapshot %s: %w", path, err)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("snapshot %s: %w: %w (%v)", path, ErrCorrupt, errInternal, r)
		}
		if err != nil {
			f.Close()
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat snapshot %s: %w", path, err)
	}
	m, err := readMeta(f, fi.Size())
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", path, err)
	}
	r := newReader(ctx, f, m)
	rootVal := make([]byte, bucketHeaderSize)
	ne.PutUint64(rootVal, m.root)
	keyVal, isBucket, err := r.lookup(rootVal, keyBucket, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: key bucket: %w", path, err)
	}
	if keyVal != nil && !isBucket {
		return nil, fmt.Errorf("snapshot %s: %w: key is a record, not a bucket", path, ErrCorrupt)
	}
	return &Keys{path: path, f: f, r: r, bucket: keyVal}, nil
}

// Close closes the file.
func (k *Keys) Close() error { return k.f.Close() }

// Get returns a copy of the record stored under the revision key rev (17
// bytes, or 18 with the tombstone mark), or nil when there is none.
func (k *Keys) Get(ctx context.Context, rev []byte) (v []byte, err error) {
	if k.bucket == nil {
		return nil, nil
	}
	defer k.recover(&err)
	k.r.ctx = ctx
	v, isBucket, err := k.r.lookup(k.bucket, rev, 0)
	if err != nil {
		return nil, fmt.Errorf("snapshot %s: key bucket: %w", k.path, err)
	}
	if isBucket {
		return nil, fmt.Errorf("snapshot %s: %w: revision key %x holds a bucket", k.path, ErrCorrupt, rev)
	}
	return v, nil
}

// Scan calls fn with every record of the key bucket in revision order. The
// slices are valid only during the call. An error from fn ends the scan
// and is returned as is.
func (k *Keys) Scan(ctx context.Context, fn func(rev, kv []byte) error) (err error) {
	if k.bucket == nil {
		return nil
	}
	defer k.recover(&err)
	k.r.ctx = ctx
	var fnErr error
	err = k.r.scanFrom(k.bucket, nil, 0, func(rk, v []byte) error {
		if fnErr = fn(rk, v); fnErr != nil {
			return errStopScan
		}
		return nil
	})
	if errors.Is(err, errStopScan) {
		return fnErr
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: key bucket: %w", k.path, err)
	}
	return nil
}

var errStopScan = errors.New("scan stopped")

func (k *Keys) recover(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("snapshot %s: %w: %w (%v)", k.path, ErrCorrupt, errInternal, r)
	}
}
