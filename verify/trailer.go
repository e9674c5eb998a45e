package verify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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
// the hex digest. A missing or wrong trailer is an error wrapping ErrCorrupt.
func Trailer(ctx context.Context, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("open snapshot %s: %w", path, err)
	}
	defer f.Close()
	digest, _, err := TrailerReader(ctx, f)
	if err != nil {
		return "", fmt.Errorf("snapshot %s: %w", path, err)
	}
	return digest, nil
}

// TrailerReader checks etcd's sha256 trailer over a stream (a decompressed
// stored object, for example). It reads r to the end and returns the hex
// digest and the size of the database without the trailer. A missing or
// wrong trailer is an error wrapping ErrCorrupt; read errors are returned
// as they are. The caller closes r.
func TrailerReader(ctx context.Context, r io.Reader) (digest string, dbSize int64, err error) {
	h := sha256.New()
	// buf holds the last sha256.Size bytes read so far at its start, followed
	// by fresh data; everything but the final sha256.Size bytes is hashed.
	buf := make([]byte, sha256.Size+readChunk)
	held := 0
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return "", 0, err
		}
		n, rerr := r.Read(buf[held:])
		total += int64(n)
		held += n
		if held > sha256.Size {
			h.Write(buf[:held-sha256.Size])
			copy(buf, buf[held-sha256.Size:held])
			held = sha256.Size
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return "", 0, fmt.Errorf("read snapshot: %w", rerr)
		}
	}
	if total < sha256.Size || total%trailerAlign != sha256.Size {
		return "", 0, fmt.Errorf("%w: no sha256 trailer (size %d is not 32 modulo 512)", ErrCorrupt, total)
	}
	dbSize = total - sha256.Size
	if dbSize == 0 {
		return "", 0, fmt.Errorf("%w: empty database before the sha256 trailer", ErrCorrupt)
	}
	sum := h.Sum(nil)
	if !bytes.Equal(sum, buf[:sha256.Size]) {
		return "", 0, fmt.Errorf("%w: sha256 trailer mismatch: data %x, trailer %x", ErrCorrupt, sum, buf[:sha256.Size])
	}
	return hex.EncodeToString(sum), dbSize, nil
}
