package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
)

// trailerAlign is the alignment etcd's snapshot stream keeps: the database
// is a whole number of bbolt pages, so with the 32-byte trailer the stream
// length is 32 modulo 512 (etcdutl's hasChecksum test).
const trailerAlign = 512

// readChunk is the read size for trailer hashing; ctx is checked per chunk.
const readChunk = 1 << 20

// Trailer checks etcd's sha256 trailer of the snapshot file at path: the file
// must be the database bytes followed by sha256 of those bytes. It returns
// the hex digest. A missing or wrong trailer is an error wrapping ErrCorrupt
// (a *TrailerError).
func Trailer(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open snapshot %s: %w", path, err)
	}
	defer f.Close()
	digest, _, err := trailerReader(ctx, f)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", path, err)
	}
	return digest, nil
}

// trailerReader checks etcd's sha256 trailer over a stream: it reads r to
// the end, checking ctx before each chunk, and returns the hex digest and
// the size of the database without the trailer. A missing or wrong trailer
// is a *TrailerError; read errors are returned as they are.
func trailerReader(ctx context.Context, r io.Reader) (digest string, dbSize int64, err error) {
	th := NewTrailerHash()
	buf := make([]byte, readChunk)
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		n, rerr := r.Read(buf)
		th.Write(buf[:n])
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return "", 0, fmt.Errorf("read snapshot: %w", rerr)
		}
	}
	digest, err = th.Check()
	if err != nil {
		return "", 0, err
	}
	return digest, th.Size() - sha256.Size, nil
}

// TrailerHash checks etcd's sha256 trailer of a snapshot stream as the
// stream is written to it: the database bytes followed by sha256 of those
// bytes, as Maintenance.Snapshot sends it and `etcdctl snapshot save`
// writes it. It hashes everything but the last 32 bytes written so far and
// holds those back across writes of any size; at the end they are the
// trailer. It is the one trailer check of lifeboat: the snapshot stream
// (package snapshot), the fetch of a stored backup and Trailer use it.
//
// Create it with NewTrailerHash. A TrailerHash is not safe for concurrent
// use.
type TrailerHash struct {
	h    hash.Hash
	tail [sha256.Size]byte
	nt   int   // bytes held in tail
	n    int64 // bytes written
}

// NewTrailerHash returns a TrailerHash that has seen no bytes.
func NewTrailerHash() *TrailerHash { return &TrailerHash{h: sha256.New()} }

// Write adds p to the stream. It never fails.
func (t *TrailerHash) Write(p []byte) (int, error) {
	t.n += int64(len(p))
	if len(p) >= sha256.Size {
		// Everything held back is now followed by at least 32 bytes.
		t.h.Write(t.tail[:t.nt])
		cut := len(p) - sha256.Size
		t.h.Write(p[:cut])
		t.nt = copy(t.tail[:], p[cut:])
		return len(p), nil
	}
	// Keep the last 32 of tail+p; hash what falls out in front.
	if over := t.nt + len(p) - sha256.Size; over > 0 {
		t.h.Write(t.tail[:over])
		t.nt = copy(t.tail[:], t.tail[over:t.nt])
	}
	t.nt += copy(t.tail[t.nt:], p)
	return len(p), nil
}

// Size returns the number of bytes written, trailer included.
func (t *TrailerHash) Size() int64 { return t.n }

// Check checks the stream written so far: its size must be a non-empty
// database of whole 512-byte sectors plus the 32-byte trailer, and the
// trailer the sha256 of the database. It returns the hex digest, or a
// *TrailerError (which wraps ErrCorrupt). Check does not change t.
func (t *TrailerHash) Check() (string, error) {
	if t.n < sha256.Size || t.n%trailerAlign != sha256.Size || t.n == sha256.Size {
		return "", &TrailerError{Size: t.n}
	}
	sum := t.h.Sum(nil)
	if !bytes.Equal(sum, t.tail[:]) {
		return "", &TrailerError{Size: t.n, Sum: sum, Trailer: bytes.Clone(t.tail[:])}
	}
	return hex.EncodeToString(sum), nil
}

// TrailerError is a failed trailer check (TrailerHash.Check, Trailer). It
// wraps ErrCorrupt.
type TrailerError struct {
	// Size is the number of bytes checked, trailer included.
	Size int64
	// Sum is the sha256 of the database and Trailer the trailer that
	// differs from it. Both are nil when the size rules out a trailer (it
	// is missing, or the stream was cut short) or leaves no database
	// before it.
	Sum, Trailer []byte
}

func (e *TrailerError) Error() string {
	switch {
	case e.Trailer != nil:
		return fmt.Sprintf("%v: sha256 trailer mismatch: data %x, trailer %x", ErrCorrupt, e.Sum, e.Trailer)
	case e.Size == sha256.Size:
		return fmt.Sprintf("%v: empty database before the sha256 trailer", ErrCorrupt)
	}
	return fmt.Sprintf("%v: no sha256 trailer (size %d is not 32 modulo 512)", ErrCorrupt, e.Size)
}

// Unwrap returns ErrCorrupt.
func (e *TrailerError) Unwrap() error { return ErrCorrupt }
