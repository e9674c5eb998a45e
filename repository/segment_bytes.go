package repository

import (
	"crypto/sha256"
	"fmt"
	"io"
)

// ParseSegmentBytes is ParseSegment over a raw form held in memory whole
// (ReadSegmentRaw's): the same checks and errors, without copying the
// values: the PUT values of the result are slices of raw (keys are
// copies: a store may keep a key, never raw), and its sha256 is taken in
// one pass. Replay parses its segments so: the copies, the sha256 of
// each varint byte apart and the garbage were a third of reading them.
//
// Like ParseSegment, it reads a signed segment's signature without
// checking it: ReadSegmentRaw has (with trust configured), over the
// sha256 this checks.
func ParseSegmentBytes(raw []byte) (*Segment, error) {
	sr := &sliceReader{b: raw}
	s, _, err := parseSegmentFrom(&segReader{r: sr}, func() []byte {
		sum := sha256.Sum256(raw[:sr.off])
		return sum[:]
	}, func() bool { return sr.off == len(raw) })
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadSegment, err)
	}
	return s, nil
}

// rawSeal returns the seal at the end of a raw form whose header said
// whether it is signed, as stored (the sha256 is the claimed one: the
// parse of the whole raw form checks it). A raw form too short for it
// wraps ErrBadSegment.
func rawSeal(raw []byte, signed bool) (segmentSeal, error) {
	n := sha256.Size
	if signed {
		n += segmentSigSize
	}
	if len(raw) < len(segmentMagic)+n {
		return segmentSeal{}, fmt.Errorf("%w: truncated", ErrBadSegment)
	}
	tail := raw[len(raw)-n:]
	seal := segmentSeal{sum: tail[:sha256.Size]}
	if signed {
		seal.sig = parseSegmentSig(tail[sha256.Size:])
	}
	return seal, nil
}

// sliceReader reads a byte slice; take returns its next bytes without a
// copy.
type sliceReader struct {
	b   []byte
	off int
}

func (r *sliceReader) ReadByte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

func (r *sliceReader) Read(p []byte) (int, error) {
	if r.off >= len(r.b) {
		return 0, io.EOF
	}
	n := copy(p, r.b[r.off:])
	r.off += n
	return n, nil
}

// take returns the next n bytes (capacity n: an append copies), or false
// when fewer are left.
func (r *sliceReader) take(n uint64) ([]byte, bool) {
	if n > uint64(len(r.b)-r.off) {
		r.off = len(r.b)
		return nil, false
	}
	b := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return b, true
}

// value reads a PUT's value: a slice of the input for a sliceReader, else
// a copy (str).
func (d *segReader) value(limit uint64) []byte {
	sr, ok := d.r.(*sliceReader)
	if !ok {
		return d.str(limit)
	}
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > limit {
		d.fail(fmt.Errorf("a string of %d bytes (at most %d)", n, limit))
		return nil
	}
	b, ok := sr.take(n)
	if !ok {
		d.fail(io.ErrUnexpectedEOF)
	}
	return b
}

// readAllInto is io.ReadAll appending to buf.
func readAllInto(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}
