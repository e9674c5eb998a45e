package replica

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ErrMismatch is wrapped when an object's bytes (in the primary as they
// stream, or in the copy as read back) do not match what their manifest
// or the primary says.
var ErrMismatch = errors.New("object does not match")

// want is what an object's bytes must be: size and hex sha256 (size -1:
// any size, for objects whose only reference is the primary's bytes).
type want struct {
	size   int64
	sha256 string
}

func (w want) check(key, where string, n int64, h hash.Hash) error {
	if w.size >= 0 && n != w.size {
		return fmt.Errorf("%w: %s in %s has %d bytes, want %d", ErrMismatch, key, where, n, w.size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != w.sha256 {
		return fmt.Errorf("%w: %s in %s has sha256 %s, want %s", ErrMismatch, key, where, got, w.sha256)
	}
	return nil
}

// object makes key in the copy hold exactly w: an object already there
// (a killed run's) is adopted when it checks out and replaced when not;
// otherwise the primary's object is streamed across, its bytes checked as
// they go (a mismatch aborts the upload), then read back from the copy
// and checked again.
func (r *runner) object(ctx context.Context, key string, w want, opts uploader.PutOptions) error {
	to := r.job.To.Store
	if _, err := to.Stat(ctx, key); err == nil {
		if err := readBack(ctx, to, key, w); err == nil {
			r.res.Adopted++
			r.lg.Info("copy: adopted an object a previous run left", "key", key)
			return nil
		} else if !errors.Is(err, ErrMismatch) {
			return err
		}
		// No manifest names it yet (we are before the commit): not a
		// backup, only a failed copy's leftover.
		r.lg.Warn("copy: replacing a leftover object that does not check out", "key", key)
		if err := to.Delete(ctx, key); err != nil {
			return fmt.Errorf("remove the leftover %s in the copy: %w", key, err)
		}
		r.res.Replaced++
	} else if !errors.Is(err, uploader.ErrNotFound) {
		return fmt.Errorf("stat %s in the copy: %w", key, err)
	}
	rc, err := r.job.From.Store.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read %s from the primary: %w", key, err)
	}
	defer rc.Close()
	cr := &checking{r: rc, h: sha256.New(), w: w, key: key, where: "the primary"}
	info, err := to.Put(ctx, key, cr, opts)
	if err != nil {
		return fmt.Errorf("write %s to the copy: %w", key, err)
	}
	r.res.Bytes += info.Size
	return readBack(ctx, to, key, w)
}

// small copies a small document (a kit manifest) byte for byte, checked
// against the primary's bytes when read back; one the copy already holds
// with the same bytes is kept.
func (r *runner) small(ctx context.Context, key string, opts uploader.PutOptions) error {
	data, err := readAll(ctx, r.job.From.Store, key, 4<<20)
	if err != nil {
		return fmt.Errorf("read %s from the primary: %w", key, err)
	}
	return r.put(ctx, key, data, opts)
}

// put writes data at key in the copy (conditionally) and reads it back.
func (r *runner) put(ctx context.Context, key string, data []byte, opts uploader.PutOptions) error {
	sum := sha256.Sum256(data)
	w := want{size: int64(len(data)), sha256: hex.EncodeToString(sum[:])}
	to := r.job.To.Store
	info, err := to.Put(ctx, key, bytes.NewReader(data), opts)
	switch {
	case errors.Is(err, uploader.ErrExists):
		if err := readBack(ctx, to, key, w); err != nil {
			return fmt.Errorf("the copy already holds %s, and not the primary's bytes: %w", key, err)
		}
		r.res.Adopted++
		return nil
	case err != nil:
		return fmt.Errorf("write %s to the copy: %w", key, err)
	}
	r.res.Bytes += info.Size
	return readBack(ctx, to, key, w)
}

// readBack reads key from st whole and checks it against w.
func readBack(ctx context.Context, st uploader.Store, key string, w want) error {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read back %s from the copy: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		return fmt.Errorf("read back %s from the copy: %w", key, err)
	}
	return w.check(key, "the copy", n, h)
}

func readAll(ctx context.Context, st uploader.Store, key string, limit int64) ([]byte, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", key, limit)
	}
	return data, nil
}

// checking hashes what it reads and, at the end, returns an error
// wrapping ErrMismatch instead of io.EOF when the bytes are not w: the
// store's Put then aborts (uploader.Store's contract), so a damaged
// primary object never lands in the copy.
type checking struct {
	r          io.Reader
	h          hash.Hash
	n          int64
	w          want
	key, where string
}

func (c *checking) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.h.Write(p[:n])
	c.n += int64(n)
	if c.w.size >= 0 && c.n > c.w.size {
		return n, c.damaged(c.w.check(c.key, c.where, c.n, c.h))
	}
	if err == io.EOF {
		if cerr := c.w.check(c.key, c.where, c.n, c.h); cerr != nil {
			return n, c.damaged(cerr)
		}
	}
	return n, err
}

// damaged makes a mismatch of the primary's bytes against their manifest
// proven damage of the primary's object (a *repository.DamageError).
func (c *checking) damaged(err error) error {
	if err == nil || c.where != "the primary" {
		return err
	}
	return &repository.DamageError{Key: c.key, Err: err}
}
