package scrub

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"sync"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// headBytes is how much of an encrypted object the header check reads:
// an age header with dozens of recipients fits.
const headBytes = 64 << 10

// verdict is what one check of one object concluded.
type verdict int

const (
	good       verdict = iota
	damaged            // proven by the bytes
	notChecked         // could not read: unknown, never good
	gone               // deleted since the listing (prune, compaction)
	untrusted          // the trust code reports it
	keys               // no configured identity opens it
)

// outcome is a verdict with its words and the bytes read for it.
type outcome struct {
	v       verdict
	problem string
	bytes   int64
	full    bool // read in full and good
}

// watch is a Store that remembers whether a read failed in the store
// (the request or the transfer), so that an error is told apart from
// damage: bad bytes arrive whole, a store's failure does not.
type watch struct {
	uploader.Store
	mu      sync.Mutex
	failed  error
	missing bool
	read    int64
}

func (w *watch) note(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(err, uploader.ErrNotFound) {
		w.missing = true
		return
	}
	if w.failed == nil {
		w.failed = err
	}
}

// Get implements uploader.Store, watching the reader.
func (w *watch) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	rc, err := w.Store.Get(ctx, key)
	if err != nil {
		w.note(err)
		return nil, err
	}
	return &watchedReader{rc: rc, w: w}, nil
}

// GetRange implements uploader.RangeReader when the store does.
func (w *watch) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rr, ok := w.Store.(uploader.RangeReader)
	if !ok {
		return w.Get(ctx, key)
	}
	rc, err := rr.GetRange(ctx, key, off, n)
	if err != nil {
		w.note(err)
		return nil, err
	}
	return &watchedReader{rc: rc, w: w}, nil
}

type watchedReader struct {
	rc io.ReadCloser
	w  *watch
}

func (r *watchedReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	r.w.mu.Lock()
	r.w.read += int64(n)
	r.w.mu.Unlock()
	if err != nil && err != io.EOF {
		r.w.note(err)
	}
	return n, err
}

func (r *watchedReader) Close() error { return r.rc.Close() }

// judge turns a check's error into a verdict, the store's failures first:
// whatever the parser said of bytes that did not all arrive is unknown.
func (w *watch) judge(ctx context.Context, err error) outcome {
	w.mu.Lock()
	failed, missing, read := w.failed, w.missing, w.read
	w.mu.Unlock()
	o := outcome{bytes: read}
	var nm *age.NoIdentityMatchError
	switch {
	case err == nil:
		o.v = good
	case failed != nil:
		o.v, o.problem = notChecked, "the store failed: "+failed.Error()
	case ctx.Err() != nil:
		o.v, o.problem = notChecked, "the run ended: "+ctx.Err().Error()
	case missing:
		o.v = gone
	case errors.Is(err, signing.ErrUntrusted):
		o.v, o.problem = untrusted, err.Error()
	case errors.Is(err, repository.ErrDecrypt) || errors.Is(err, kit.ErrDecrypt) || errors.As(err, &nm):
		o.v, o.problem = keys, "no configured identity opens it (encrypted to other recipients: orphaned by a key rotation?)"
	default:
		o.v, o.problem = damaged, err.Error()
	}
	return o
}

// checker checks objects of one repository.
type checker struct {
	repo *repository.Repo
	kits kit.Repo
	ids  []age.Identity
}

// check runs the header check (encrypted objects, unless read in full)
// and the full read (when full) of o.
func (c *checker) check(ctx context.Context, o *object, full bool) outcome {
	w := &watch{Store: c.repo.Store}
	var err error
	switch {
	case full:
		err = c.readFull(ctx, w, o)
	case o.encrypted:
		err = c.header(ctx, w, o)
	}
	return w.judge(ctx, err)
}

// header opens o's age header with the identities from its first bytes.
func (c *checker) header(ctx context.Context, w *watch, o *object) error {
	if o.Size == 0 {
		return errors.New("empty, but an encrypted object starts with an age header")
	}
	head, err := uploader.ReadHead(ctx, w, o.Key, headBytes)
	if err != nil {
		return err
	}
	_, err = age.Decrypt(bytes.NewReader(head), c.ids...)
	if err == nil {
		return nil
	}
	var nm *age.NoIdentityMatchError
	if errors.As(err, &nm) {
		return err
	}
	if int64(len(head)) == headBytes && o.Size > headBytes {
		// A header longer than what was read: not proven damaged.
		w.note(fmt.Errorf("its age header is longer than %d bytes: %w", headBytes, err))
		return err
	}
	return fmt.Errorf("age header: %w", err)
}

// readFull reads o whole and checks it as its kind's reader does.
func (c *checker) readFull(ctx context.Context, w *watch, o *object) error {
	repo := *c.repo
	repo.Store = w
	switch o.kind {
	case KindBackup, KindKit:
		if o.encrypted {
			if err := c.header(ctx, w, o); err != nil {
				return err
			}
		}
		return digest(ctx, w, o)
	case KindSegment:
		_, _, err := repo.ReadSegment(ctx, *o.seg, c.ids)
		return err
	case KindKitManifest:
		kits := c.kits
		kits.Store = w
		_, err := kits.Manifest(ctx, o.kitID)
		return err
	default:
		return repo.ReadDocumentAt(ctx, o.Key)
	}
}

// digest reads o's stored bytes and compares their size and sha256 with
// what its manifest records.
func digest(ctx context.Context, st uploader.Store, o *object) error {
	rc, err := st.Get(ctx, o.Key)
	if err != nil {
		return err
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, rc, make([]byte, 1<<20))
	if err != nil {
		return err
	}
	if got := hex.EncodeToString(h.Sum(nil)); n != o.Size || got != o.sha256 {
		return fmt.Errorf("%d bytes of sha256 %s, its manifest says %d bytes of %s", n, got, o.Size, o.sha256)
	}
	return nil
}
