package repository

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// localFiler is a store whose objects are files on this machine
// (uploader.Dir).
type localFiler interface {
	LocalFile(key string) (string, error)
}

// PlainLocalFile returns the path of backup m's stored object when that
// file is the raw snapshot itself and can be read in place: a store on
// this machine's file system, an object neither compressed nor encrypted.
// The file belongs to the store: open it read-only, never change or
// remove it.
func (b *Repo) PlainLocalFile(m *Manifest) (string, bool) {
	lf, ok := b.Store.(localFiler)
	if !ok || m.Compression != "none" || m.Encryption != "none" {
		return "", false
	}
	p, err := lf.LocalFile(m.Object)
	if err != nil {
		return "", false
	}
	return p, true
}

// CheckInPlace checks the plain stored object at path (PlainLocalFile)
// as Fetch checks what it writes, reading it once and writing nothing: its
// size and sha256 against the manifest (an error wrapping
// ErrObjectMismatch), etcd's sha256 trailer (verify.ErrCorrupt) and the
// trailer's digest against the manifest's snapshot sha256
// (verify.ErrManifestMismatch). The two sha256 run side by side. The
// result's Path is path; its Decode is the time of the pass.
func CheckInPlace(ctx context.Context, path string, m *Manifest, o FetchOptions) (*FetchResult, error) {
	now := o.Now
	if now == nil {
		now = time.Now
	}
	res := &FetchResult{Path: path}
	start := now()
	defer func() { res.Decode = now().Sub(start) }()
	f, err := os.Open(path)
	if err != nil {
		return res, fmt.Errorf("open %s: %w", path, err)
	}
	defer f.Close()
	oh := sha256.New()
	th := verify.NewTrailerHash()
	// The object's hash in stream's reading goroutine, the trailer's in
	// this one.
	in := io.TeeReader(f, oh)
	err = stream(ctx, in, func(p []byte) error {
		th.Write(p)
		res.ObjectSize += int64(len(p))
		if o.Progress != nil {
			o.Progress(res.ObjectSize, th.Size())
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("read %s: %w", path, err)
	}
	res.Size = th.Size()
	if err := checkObject(m, res.ObjectSize, oh); err != nil {
		return res, err
	}
	return res, checkTrailer(th, m, res)
}
