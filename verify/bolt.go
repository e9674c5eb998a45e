package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"os"
)

// This file reads bbolt's on-disk format (go.etcd.io/bbolt, file format
// version 2) directly, only to prove a file safe before bbolt touches it.
// bbolt trusts page ids and element offsets read from its memory map; on a
// damaged file it can read outside the map (a fault Go cannot recover from
// in bbolt's own goroutines) or loop forever on a page cycle. preflight and
// walker check every reference bbolt's read path and tx.Check will follow.

const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16 // id u64, flags u16, count u16, overflow u32
	elementSize      = 16 // branch: pos, ksize u32, pgid u64; leaf: flags, pos, ksize, vsize u32
	bucketHeaderSize = 16 // root pgid u64, sequence u64
	metaSize         = 64
	metaChecksumOff  = 56
	noFreelist       = 0xFFFFFFFFFFFFFFFF

	branchPage   = 0x01
	leafPage     = 0x02
	metaPage     = 0x04
	freelistPage = 0x10
	bucketLeaf   = 0x01

	minPageSize = 1024
	maxPageSize = 1 << 24

	// maxDepth bounds b+tree and bucket nesting; etcd's trees are a few
	// levels deep.
	maxDepth = 64
)

// boltMeta is the meta page bbolt will use for a file.
type boltMeta struct {
	pageSize uint64
	root     uint64 // root bucket page
	freelist uint64
	pgid     uint64 // high water mark: pages in use
	txid     uint64
}

// ne is bbolt's byte order: it writes native integers.
var ne = binary.NativeEndian

// parseMeta decodes and validates a meta page as bbolt's Meta.Validate does.
func parseMeta(p []byte) (boltMeta, bool) {
	if len(p) < pageHeaderSize+metaSize {
		return boltMeta{}, false
	}
	m := p[pageHeaderSize : pageHeaderSize+metaSize]
	if ne.Uint32(m[0:]) != boltMagic || ne.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:metaChecksumOff])
	if h.Sum64() != ne.Uint64(m[metaChecksumOff:]) {
		return boltMeta{}, false
	}
	return boltMeta{
		pageSize: uint64(ne.Uint32(m[8:])),
		root:     ne.Uint64(m[16:]),
		freelist: ne.Uint64(m[32:]),
		pgid:     ne.Uint64(m[40:]),
		txid:     ne.Uint64(m[48:]),
	}, true
}

// preflight reads the meta pages of f (size bytes) with the same rules as
// bbolt.Open and DB.meta, and checks that everything bbolt will map is
// inside the file.
func preflight(f *os.File, size int64) (boltMeta, error) {
	if size < 2*minPageSize {
		return boltMeta{}, fmt.Errorf("%w: %d bytes is too small for a bbolt database", ErrCorrupt, size)
	}
	readAt := func(off int64, n int) []byte {
		b := make([]byte, n)
		m, err := f.ReadAt(b, off)
		if err != nil && err != io.EOF {
			return nil
		}
		return b[:m]
	}
	// Page size: from meta 0, else from the first valid meta 1 candidate
	// (bbolt's getPageSize).
	var pageSize uint64
	if m, ok := parseMeta(readAt(0, pageHeaderSize+metaSize)); ok {
		pageSize = m.pageSize
	} else {
		for i := range 15 {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			if m, ok := parseMeta(readAt(pos, pageHeaderSize+metaSize)); ok {
				pageSize = m.pageSize
				break
			}
		}
	}
	if pageSize == 0 {
		return boltMeta{}, fmt.Errorf("%w: no valid bbolt meta page", ErrCorrupt)
	}
	if pageSize < minPageSize || pageSize > maxPageSize {
		return boltMeta{}, fmt.Errorf("%w: bbolt page size %d out of range", ErrCorrupt, pageSize)
	}
	if uint64(size) < 2*pageSize {
		return boltMeta{}, fmt.Errorf("%w: %d bytes is shorter than the two meta pages", ErrCorrupt, size)
	}
	m0, ok0 := parseMeta(readAt(0, pageHeaderSize+metaSize))
	m1, ok1 := parseMeta(readAt(int64(pageSize), pageHeaderSize+metaSize))
	var m boltMeta
	switch {
	case ok0 && ok1:
		m = m0
		if m1.txid > m0.txid {
			m = m1
		}
	case ok0:
		m = m0
	case ok1:
		m = m1
	default:
		return boltMeta{}, fmt.Errorf("%w: both bbolt meta pages are invalid", ErrCorrupt)
	}
	m.pageSize = pageSize
	if m.pgid < 3 || m.pgid > uint64(size)/pageSize {
		return boltMeta{}, fmt.Errorf("%w: truncated: database has %d pages of %d bytes, file has %d bytes",
			ErrCorrupt, m.pgid, pageSize, size)
	}
	if m.root < 2 || m.root >= m.pgid {
		return boltMeta{}, fmt.Errorf("%w: root page %d out of range [2,%d)", ErrCorrupt, m.root, m.pgid)
	}
	if m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pgid) {
		return boltMeta{}, fmt.Errorf("%w: freelist page %d out of range [2,%d)", ErrCorrupt, m.freelist, m.pgid)
	}
	return m, nil
}

// walker checks the page tree of a mapped bbolt file: every page id in
// range and referenced once (so there are no cycles), every page a branch or
// leaf page whose header names it, every element, key, value and inline
// bucket inside its page.
type walker struct {
	ctx      context.Context
	data     []byte // the mapped file, pgid*pageSize bytes
	pageSize uint64
	hwm      uint64
	seen     []uint64 // bitmap of referenced pages
	pages    int
}

func newWalker(ctx context.Context, data []byte, m boltMeta) *walker {
	return &walker{
		ctx:      ctx,
		data:     data[:m.pgid*m.pageSize],
		pageSize: m.pageSize,
		hwm:      m.pgid,
		seen:     make([]uint64, (m.pgid+63)/64),
	}
}

// walk checks the root bucket's tree and the freelist page.
func (w *walker) walk(m boltMeta) error {
	if err := w.page(m.root, 0); err != nil {
		return err
	}
	if m.freelist != noFreelist {
		return w.freelist(m.freelist)
	}
	return nil
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// span checks the header of page id and marks the pages it covers; it
// returns the page's bytes and header fields.
func (w *walker) span(id uint64) (p []byte, flags, count uint16, err error) {
	if id < 2 || id >= w.hwm {
		return nil, 0, 0, corruptf("page %d out of range [2,%d)", id, w.hwm)
	}
	off := id * w.pageSize
	hdr := w.data[off : off+pageHeaderSize]
	if got := ne.Uint64(hdr); got != id {
		return nil, 0, 0, corruptf("page %d: header names page %d", id, got)
	}
	flags, count = ne.Uint16(hdr[8:]), ne.Uint16(hdr[10:])
	overflow := uint64(ne.Uint32(hdr[12:]))
	if overflow >= w.hwm-id {
		return nil, 0, 0, corruptf("page %d: %d overflow pages run past page %d", id, overflow, w.hwm)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i/64]&(1<<(i%64)) != 0 {
			return nil, 0, 0, corruptf("page %d referenced twice", i)
		}
		w.seen[i/64] |= 1 << (i % 64)
	}
	w.pages++
	if w.pages%4096 == 0 {
		if err := w.ctx.Err(); err != nil {
			return nil, 0, 0, err
		}
	}
	return w.data[off : off+(overflow+1)*w.pageSize], flags, count, nil
}

func (w *walker) page(id uint64, depth int) error {
	if depth > maxDepth {
		return corruptf("page %d: tree deeper than %d", id, maxDepth)
	}
	p, flags, count, err := w.span(id)
	if err != nil {
		return err
	}
	switch flags {
	case branchPage:
		if count == 0 {
			return corruptf("page %d: empty branch page", id)
		}
		if pageHeaderSize+uint64(count)*elementSize > uint64(len(p)) {
			return corruptf("page %d: %d elements overflow the page", id, count)
		}
		for i := range uint64(count) {
			e := pageHeaderSize + i*elementSize
			pos, ksize := uint64(ne.Uint32(p[e:])), uint64(ne.Uint32(p[e+4:]))
			if e+pos+ksize > uint64(len(p)) {
				return corruptf("page %d: branch element %d key outside the page", id, i)
			}
			if err := w.page(ne.Uint64(p[e+8:]), depth+1); err != nil {
				return err
			}
		}
		return nil
	case leafPage:
		return w.leaf(fmt.Sprintf("page %d", id), p, count, depth)
	default:
		return corruptf("page %d: type %#x is not a branch or leaf page", id, flags)
	}
}

// leaf checks the elements of a leaf page p (a mapped page, or an inline
// bucket's page inside a value) and the buckets they hold.
func (w *walker) leaf(name string, p []byte, count uint16, depth int) error {
	if pageHeaderSize+uint64(count)*elementSize > uint64(len(p)) {
		return corruptf("%s: %d elements overflow the page", name, count)
	}
	for i := range uint64(count) {
		e := pageHeaderSize + i*elementSize
		flags := ne.Uint32(p[e:])
		pos, ksize, vsize := uint64(ne.Uint32(p[e+4:])), uint64(ne.Uint32(p[e+8:])), uint64(ne.Uint32(p[e+12:]))
		end := e + pos + ksize + vsize
		if end > uint64(len(p)) {
			return corruptf("%s: leaf element %d outside the page", name, i)
		}
		if flags&bucketLeaf == 0 {
			continue
		}
		if err := w.bucket(name, p[e+pos+ksize:end], depth+1); err != nil {
			return err
		}
	}
	return nil
}

// bucket checks a bucket value: its root page tree, or its inline page.
func (w *walker) bucket(parent string, v []byte, depth int) error {
	if depth > maxDepth {
		return corruptf("%s: buckets nested deeper than %d", parent, maxDepth)
	}
	if len(v) < bucketHeaderSize {
		return corruptf("%s: bucket value of %d bytes", parent, len(v))
	}
	if root := ne.Uint64(v); root != 0 {
		return w.page(root, depth)
	}
	p := v[bucketHeaderSize:]
	if len(p) < pageHeaderSize {
		return corruptf("%s: inline bucket of %d bytes", parent, len(v))
	}
	if flags := ne.Uint16(p[8:]); flags != leafPage {
		return corruptf("%s: inline bucket page type %#x", parent, flags)
	}
	return w.leaf(parent+" inline bucket", p, ne.Uint16(p[10:]), depth)
}

// freelist checks that the freelist page's ids lie inside it.
func (w *walker) freelist(id uint64) error {
	p, flags, count, err := w.span(id)
	if err != nil {
		return err
	}
	if flags != freelistPage {
		return corruptf("freelist page %d: type %#x", id, flags)
	}
	n, first := uint64(count), uint64(0)
	if count == 0xFFFF {
		if len(p) < pageHeaderSize+8 {
			return corruptf("freelist page %d: no count", id)
		}
		n, first = ne.Uint64(p[pageHeaderSize:]), 1
	}
	if avail := (uint64(len(p)) - pageHeaderSize) / 8; n > avail || first+n > avail {
		return corruptf("freelist page %d: %d ids overflow the page", id, n)
	}
	return nil
}
