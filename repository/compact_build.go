package repository

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"

	"filippo.io/age"
	"github.com/klauspost/compress/zstd"
)

// compactBuild is one compacted segment being made, its sources taken
// one at a time: each source's revision records are encoded into body
// (compressed: a zstd frame) as it arrives and the source is then let go,
// so a step holds one parsed source and the compressed records, not its
// sources whole.
//
// The raw form puts the header first, and the header needs the last
// source (its last revision, captured-through and chain hash), so the
// stored object is made at the end from three parts: the header encoded
// alone, body, and the leases, 'E', sha256 and signature encoded alone.
// With zstd each part is a frame of its own, and a zstd stream of
// concatenated frames decodes to their concatenation: the raw form is
// byte for byte the one encodeSegment writes for the merge of the same
// sources (TestCompactBuildIsTheMerge). Its sha256, which covers the
// header first, is taken at the end over the header, body decoded again
// as a stream, and the rest.
type compactBuild struct {
	compress bool
	body     chunks
	// head and tail are the stored header and trailer (finish).
	head, tail []byte
	zw         *zstd.Encoder // the records' frame; nil without compression
	bw         *bufio.Writer
	e          segWriter

	first, last SegmentHeader
	token       int64
	leases      []Lease
	seen        map[int64]bool
	revisions   int
	firstRev    int64
	lastRev     int64
	size        int64
	sources     []SegmentInfo
	links       []ChainLink
}

func newCompactBuild(e Encoding) (*compactBuild, error) {
	c := &compactBuild{compress: e.segmentEncoding().CompressionName() == "zstd", seen: map[int64]bool{}}
	var w io.Writer = &c.body
	if c.compress {
		zw, err := zstd.NewWriter(w, zstdOptions()...)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		c.zw, w = zw, zw
	}
	c.bw = bufio.NewWriterSize(w, 64<<10)
	c.e = segWriter{w: c.bw}
	return c, nil
}

// add writes source s (listed as si, linked as link, n raw bytes) into
// the segment, letting its revisions go as they are written.
func (c *compactBuild) add(si SegmentInfo, s *Segment, link ChainLink, n int64) error {
	if len(c.sources) == 0 {
		c.first = s.SegmentHeader
	}
	c.last = s.SegmentHeader
	c.token = max(c.token, s.Token)
	for i := range s.Revisions {
		r := s.Revisions[i]
		s.Revisions[i] = Revision{}
		switch {
		case c.revisions == 0:
			c.firstRev = r.Revision
		case r.Revision != c.lastRev+1:
			return fmt.Errorf("encode segment: revision %d follows %d: revisions must be dense", r.Revision, c.lastRev)
		}
		c.revisions++
		c.lastRev = r.Revision
		c.e.revision(&r)
	}
	for _, l := range s.Leases {
		if !c.seen[l.ID] {
			c.seen[l.ID] = true
			c.leases = append(c.leases, l)
		}
	}
	c.sources, c.links, c.size = append(c.sources, si), append(c.links, link), c.size+n
	return c.e.err
}

// header is the compacted segment's header (as merge makes it).
func (c *compactBuild) header(st CompactStep) SegmentHeader {
	return compactedHeader(st, c.first, c.last, c.token, c.links[len(c.links)-1])
}

// validate checks what Segment.Validate checks of the merge: the header,
// and the revisions' ends against it (each source was checked whole when
// it was parsed, the leases are deduplicated and each lies in its
// source's range).
func (c *compactBuild) validate(h *SegmentHeader) error {
	if err := h.validate(); err != nil {
		return fmt.Errorf("encode segment: %w", err)
	}
	if c.revisions > 0 {
		if c.firstRev != h.First || c.lastRev != h.Last {
			return fmt.Errorf("encode segment: revisions %d-%d, header says %d-%d", c.firstRev, c.lastRev, h.First, h.Last)
		}
	} else if h.CapturedThrough != h.Last {
		return fmt.Errorf("encode segment: empty segment %d-%d with captured-through %d: want captured-through = last", h.First, h.Last, h.CapturedThrough)
	}
	return nil
}

// finish checks the segment with header h and ends it: the header and
// the trailer (leases, 'E', sha256 and, with g, the signature) are made,
// the records' frame is closed. Then reader gives its stored bytes.
func (c *compactBuild) finish(h SegmentHeader, g *segmentSigner) error {
	if err := c.validate(&h); err != nil {
		return err
	}
	if err := c.close(); err != nil {
		return fmt.Errorf("encode segment: %w", err)
	}
	c.head = rawPart(func(w *segWriter) { w.head(&h, g != nil) })
	tail := rawPart(func(w *segWriter) { w.leasesAndEnd(c.leases) })
	sum := sha256.New()
	sum.Write(c.head)
	if err := c.decodeBody(sum); err != nil {
		return fmt.Errorf("encode segment: %w", err)
	}
	sum.Write(tail)
	seal := bytes.NewBuffer(tail)
	if err := writeSeal(seal, sum.Sum(nil), g); err != nil {
		return err
	}
	c.tail = seal.Bytes()
	if c.compress {
		c.head, c.tail = c.zw.EncodeAll(c.head, nil), c.zw.EncodeAll(c.tail, nil)
	}
	return nil
}

// reader returns the stored bytes of a finished build, encrypted to e's
// recipients: its parts one after the other, never copied into one
// buffer (with age, encrypted as they are read). Close it when done: an
// encryption not read to its end then stops.
func (c *compactBuild) reader(e Encoding) io.ReadCloser {
	parts := io.MultiReader(bytes.NewReader(c.head), c.body.reader(), bytes.NewReader(c.tail))
	if len(e.Recipients) == 0 {
		return io.NopCloser(parts)
	}
	pr, pw := io.Pipe()
	go func() {
		// age writes its header at once: into the pipe, so here.
		aw, err := age.Encrypt(pw, e.Recipients...)
		if err != nil {
			pw.CloseWithError(fmt.Errorf("encode segment: age encryption: %w", err))
			return
		}
		if _, err = io.Copy(aw, parts); err == nil {
			err = aw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// close ends the records' frame.
func (c *compactBuild) close() error {
	if c.e.err != nil {
		return c.e.err
	}
	if err := c.bw.Flush(); err != nil {
		return err
	}
	if c.zw != nil {
		return c.zw.Close()
	}
	return nil
}

// decodeBody writes the records' raw bytes to w.
func (c *compactBuild) decodeBody(w io.Writer) error {
	compression := "none"
	if c.compress {
		compression = "zstd"
	}
	dr, err := NewDecoder(c.body.reader(), compression, "none", nil)
	if err != nil {
		return err
	}
	defer dr.Close()
	_, err = io.Copy(w, dr)
	return err
}

// rawPart returns what write writes through a segWriter.
func rawPart(write func(*segWriter)) []byte {
	var b bytes.Buffer
	bw := bufio.NewWriter(&b)
	w := &segWriter{w: bw}
	write(w)
	bw.Flush()
	return b.Bytes()
}

// chunks is a buffer of fixed-size chunks: it grows by one chunk at a
// time, never copying what it holds (a bytes.Buffer doubles, and holds
// the old and the new copy while it does).
type chunks struct {
	full [][]byte
}

// bodyChunk is a chunk's capacity.
const bodyChunk = 256 << 10

func (b *chunks) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if len(b.full) == 0 || len(b.full[len(b.full)-1]) == bodyChunk {
			b.full = append(b.full, make([]byte, 0, bodyChunk))
		}
		last := &b.full[len(b.full)-1]
		k := min(len(p), bodyChunk-len(*last))
		*last = append(*last, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

// reader reads what was written, from the start.
func (b *chunks) reader() io.Reader {
	rs := make([]io.Reader, len(b.full))
	for i, c := range b.full {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}
