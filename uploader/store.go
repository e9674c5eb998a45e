package uploader

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"
)

// ErrNotFound is returned (wrapped) by Store methods when the key does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned (wrapped) by Put when an object is already stored at
// the key: objects are created, never replaced.
var ErrExists = errors.New("object already exists")

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	// Key is the object's key relative to the store's root (slash separated).
	Key string
	// Size is the object's size in bytes.
	Size int64
	// ModTime is when the object was last written, as reported by the store.
	ModTime time.Time
	// SHA256 is the hex sha256 of the stored bytes when the store knows it
	// (Put always computes it; List and Stat may leave it empty).
	SHA256 string
	// LockMode and RetainUntil describe Object Lock retention, empty when none.
	LockMode    string
	RetainUntil time.Time
	// LegalHold is true when the object is under a legal hold.
	LegalHold bool
}

// Locked reports whether the object may not be deleted at now.
func (o ObjectInfo) Locked(now time.Time) bool {
	return o.LegalHold || (o.LockMode != "" && now.Before(o.RetainUntil))
}

// PutOptions are per-object options for Put. Stores ignore what they do not support.
type PutOptions struct {
	// ContentType is recorded where the store supports it.
	ContentType string
	// LockMode (GOVERNANCE or COMPLIANCE) and RetainUntil request Object Lock retention.
	LockMode    string
	RetainUntil time.Time
	// LegalHold requests a legal hold on the object.
	LegalHold bool
}

// Object Lock retention modes (PutOptions.LockMode).
const (
	LockGovernance = "GOVERNANCE"
	LockCompliance = "COMPLIANCE"
)

// ValidateLockMode is the one rule for an Object Lock mode (the
// configuration checks store.object_lock.mode with it): GOVERNANCE or
// COMPLIANCE, as S3 spells them.
func ValidateLockMode(mode string) error {
	switch mode {
	case LockGovernance, LockCompliance:
		return nil
	}
	return fmt.Errorf("%q is not %s or %s", mode, LockGovernance, LockCompliance)
}

// Validate reports whether o can be honoured: a lock mode is a known mode
// and comes with a retain-until time, and a retain-until time comes with a
// mode (alone it would be dropped and the object stored unlocked).
func (o PutOptions) Validate() error {
	switch {
	case o.LockMode != "":
		if err := ValidateLockMode(o.LockMode); err != nil {
			return fmt.Errorf("lock mode: %w", err)
		}
		if o.RetainUntil.IsZero() {
			return fmt.Errorf("lock mode %s without a retain-until time", o.LockMode)
		}
	case !o.RetainUntil.IsZero():
		return errors.New("retain-until time without a lock mode (GOVERNANCE or COMPLIANCE)")
	}
	return nil
}

// Store is a flat key/value object store: a local directory or an S3 bucket
// prefix. Keys are slash-separated paths relative to the store's root.
//
// Contract, shared by every implementation and checked by one test suite
// (storetest):
//   - Put reads r to io.EOF and only then makes the object visible at key,
//     atomically: a reader never sees a partial object. If r returns an error
//     other than io.EOF, or ctx ends, Put aborts (temp file removed, multipart
//     upload aborted), leaves whatever was at key untouched, and returns an
//     error wrapping r's error. This lets a caller hold back EOF until the
//     content has been verified and fail the upload otherwise.
//   - Put never replaces an object: when key exists, or another Put of the
//     same key commits first, Put fails with an error wrapping ErrExists and
//     leaves nothing behind (temp file removed, multipart upload aborted).
//     Of concurrent Puts of one key exactly one succeeds. To write a key
//     again, Delete it first.
//   - Get returns a reader the caller must Close; a missing key gives an error
//     wrapping ErrNotFound.
//   - List calls fn for every object whose key starts with prefix, in
//     lexical key order, paging internally; fn returning an error stops the
//     listing and List returns that error.
//   - Delete of a missing key is not an error (idempotent).
//   - All methods are safe for concurrent use.
//   - Errors name the object (key, bucket or path) but never credentials.
type Store interface {
	Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (ObjectInfo, error)
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error
	Delete(ctx context.Context, key string) error
	// String describes the store for logs and errors (URL without secrets).
	String() string
}

// RangeReader is a Store that reads a part of an object without
// transferring the rest (S3's ranged GET, a file's ReadAt). The reader is
// the caller's to Close; a missing key wraps ErrNotFound; a range past the
// end gives what there is.
type RangeReader interface {
	GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error)
}

// ReadHead returns the object's first n bytes, fewer when it is shorter:
// a ranged read where st is a RangeReader, else the start of a Get (the
// rest is never read).
func ReadHead(ctx context.Context, st Store, key string, n int64) ([]byte, error) {
	var rc io.ReadCloser
	var err error
	if rr, ok := st.(RangeReader); ok {
		rc, err = rr.GetRange(ctx, key, 0, n)
	} else {
		rc, err = st.Get(ctx, key)
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, n))
	if err != nil {
		return nil, fmt.Errorf("read the head of %s: %w", key, err)
	}
	return b, nil
}
