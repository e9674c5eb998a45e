package verify

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"slices"
)

// This file reads bbolt's on-disk format (go.etcd.io/bbolt, file format
// version 2) with pread, without bbolt. bbolt memory-maps the file: every
// page it reads stays resident and counts in the process's RSS (the whole
// file, for a status pass), and it trusts page ids and offsets from the map,
// so a damaged file can fault outside Go's control or loop on a page cycle.
// Here every page is read into a small reused buffer, every reference is
// bounds-checked, and the structural rules of bbolt's tx.Check are applied
// in the same pass (tests compare the verdicts with bbolt's).

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

	// maxDepth bounds b+tree and bucket nesting together; etcd's trees are
	// a few levels deep.
	maxDepth = 64
	// maxSpan bounds one page with its overflow pages (one leaf holding a
	// value of up to about this size); etcd refuses requests above 1.5 MiB
	// by default.
	maxSpan = 64 << 20
	// ctxPages is how many pages are read between context checks.
	ctxPages = 1024
	// maxFreelistErrors is how many freelist findings an error lists.
	maxFreelistErrors = 5
)

// ne is bbolt's byte order: it writes native integers.
var ne = binary.NativeEndian

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// boltMeta is the meta page bbolt would use for a file.
type boltMeta struct {
	pageSize uint64
	root     uint64 // root bucket page
	freelist uint64
	pgid     uint64 // high water mark: pages in use
	txid     uint64
}

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

// readMeta picks the meta page as bbolt.Open and DB.meta do (page size
// from meta 0, else from the first valid meta 1 candidate; then the valid
// meta with the higher txid) and checks that the database lies inside the
// file of size bytes.
func readMeta(f io.ReaderAt, size int64) (boltMeta, error) {
	if size < 2*minPageSize {
		return boltMeta{}, corruptf("%d bytes is too small for a bbolt database", size)
	}
	at := func(off int64) (boltMeta, bool) {
		b := make([]byte, pageHeaderSize+metaSize)
		n, _ := f.ReadAt(b, off)
		return parseMeta(b[:n])
	}
	var pageSize uint64
	if m, ok := at(0); ok {
		pageSize = m.pageSize
	} else {
		for i := range 15 {
			pos := int64(1024) << i
			if pos >= size-1024 {
				break
			}
			if m, ok := at(pos); ok {
				pageSize = m.pageSize
				break
			}
		}
	}
	if pageSize == 0 {
		return boltMeta{}, corruptf("no valid bbolt meta page")
	}
	if pageSize < minPageSize || pageSize > maxPageSize {
		return boltMeta{}, corruptf("bbolt page size %d out of range", pageSize)
	}
	if uint64(size) < 2*pageSize {
		return boltMeta{}, corruptf("%d bytes is shorter than the two meta pages", size)
	}
	m0, ok0 := at(0)
	m1, ok1 := at(int64(pageSize))
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
		return boltMeta{}, corruptf("both bbolt meta pages are invalid")
	}
	m.pageSize = pageSize
	// tx.Check asserts that both meta pages name themselves and have a page
	// type; the meta checksum does not cover the page header.
	for id := range int64(2) {
		h := make([]byte, pageHeaderSize)
		if _, err := f.ReadAt(h, id*int64(pageSize)); err != nil {
			return boltMeta{}, fmt.Errorf("read meta page %d: %w", id, err)
		}
		if got := ne.Uint64(h); got != uint64(id) {
			return boltMeta{}, corruptf("meta page %d: header names page %d", id, got)
		}
		switch flags := ne.Uint16(h[8:]); flags {
		case branchPage, leafPage, metaPage, freelistPage:
		default:
			return boltMeta{}, corruptf("meta page %d: page type %#x", id, flags)
		}
	}
	if m.pgid < 3 || m.pgid > uint64(size)/pageSize {
		return boltMeta{}, corruptf("truncated: database has %d pages of %d bytes, file has %d bytes",
			m.pgid, pageSize, size)
	}
	if m.root < 2 || m.root >= m.pgid {
		return boltMeta{}, corruptf("root page %d out of range [2,%d)", m.root, m.pgid)
	}
	if m.freelist != noFreelist && (m.freelist < 2 || m.freelist >= m.pgid) {
		return boltMeta{}, corruptf("freelist page %d out of range [2,%d)", m.freelist, m.pgid)
	}
	return m, nil
}

// bitmap is a set of page ids below the high water mark.
type bitmap []uint64

func newBitmap(n uint64) bitmap    { return make(bitmap, (n+63)/64) }
func (b bitmap) has(i uint64) bool { return b[i/64]&(1<<(i%64)) != 0 }
func (b bitmap) set(i uint64)      { b[i/64] |= 1 << (i % 64) }

// reader reads the pages of one bbolt file.
type reader struct {
	ctx     context.Context
	f       io.ReaderAt
	meta    boltMeta
	bufs    [maxDepth + 2][]byte // page buffers by tree depth
	seen    bitmap               // pages referenced from the tree (and meta, freelist)
	visited bitmap               // pages read by lookups, which do not check the tree
	reads   int
	keyBuf  [maxDepth + 2][]byte // copies of the running largest key by depth

	// Read-ahead: consecutive pages of a tree are often consecutive in the
	// file. A read that continues the previous one doubles the window read
	// ahead (up to maxWindow); others read minWindow pages.
	win      []byte // pages [winStart, winStart+len(win)/pageSize)
	winStart uint64
	lastEnd  uint64 // the page after the last one asked for
	ahead    uint64 // pages to read ahead on the next sequential miss
}

const (
	minWindow = 2       // pages read for a random access
	maxWindow = 1 << 20 // bytes read ahead at most
)

// span returns the n pages from id on. If aliased, the bytes are in the
// read-ahead window and valid only until the next read; otherwise they are
// in the buffer for depth.
func (r *reader) span(id, n uint64, depth int) (b []byte, aliased bool, err error) {
	ps := r.meta.pageSize
	winEnd := r.winStart + uint64(len(r.win))/ps
	if id < r.winStart || id >= winEnd {
		// Refill the window from id.
		want := uint64(minWindow)
		if id == r.lastEnd {
			r.ahead = max(min(max(2*r.ahead, minWindow), maxWindow/ps), 1)
			want = r.ahead
		} else {
			r.ahead = 0
		}
		want = min(want, r.meta.pgid-id)
		if uint64(cap(r.win)) < want*ps {
			r.win = make([]byte, want*ps, max(want*ps, min(maxWindow, r.meta.pgid*ps)))
		}
		r.win = r.win[:want*ps]
		if _, err := r.f.ReadAt(r.win, int64(id*ps)); err != nil {
			r.win = r.win[:0]
			return nil, false, fmt.Errorf("read page %d: %w", id, err)
		}
		r.winStart = id
		winEnd = id + want
	}
	r.lastEnd = id + n
	off := (id - r.winStart) * ps
	if off+n*ps <= uint64(len(r.win)) {
		return r.win[off : off+n*ps], true, nil
	}
	// The span runs past the window: read the rest directly.
	buf := r.buf(depth, n*ps)
	got := copy(buf, r.win[off:])
	if _, err := r.f.ReadAt(buf[got:], int64(winEnd*ps)); err != nil {
		return nil, false, fmt.Errorf("read page %d: %w", id, err)
	}
	return buf, false, nil
}

// buf returns the buffer for depth, n bytes long.
func (r *reader) buf(depth int, n uint64) []byte {
	b := r.bufs[depth]
	if uint64(cap(b)) < n {
		b = make([]byte, n)
	}
	r.bufs[depth] = b[:n]
	return r.bufs[depth]
}

func newReader(ctx context.Context, f io.ReaderAt, m boltMeta) *reader {
	r := &reader{ctx: ctx, f: f, meta: m, seen: newBitmap(m.pgid)}
	r.seen.set(0)
	r.seen.set(1)
	return r
}

// page is one page read with its overflow pages.
type page struct {
	id    uint64
	b     []byte
	flags uint16
	count int
}

// load reads page id and its overflow pages into the buffer for depth. With
// mark it records the pages as referenced and fails on a second reference,
// which also rules out cycles.
func (r *reader) load(id uint64, depth int, mark bool) (page, error) {
	if depth > maxDepth {
		return page{}, corruptf("page %d: tree deeper than %d", id, maxDepth)
	}
	ps := r.meta.pageSize
	if id < 2 || id >= r.meta.pgid {
		return page{}, corruptf("page %d out of range [2,%d)", id, r.meta.pgid)
	}
	if r.reads++; r.reads%ctxPages == 0 {
		if err := r.ctx.Err(); err != nil {
			return page{}, err
		}
	}
	hdr, _, err := r.span(id, 1, depth)
	if err != nil {
		return page{}, err
	}
	if got := ne.Uint64(hdr); got != id {
		return page{}, corruptf("page %d: header names page %d", id, got)
	}
	p := page{id: id, flags: ne.Uint16(hdr[8:]), count: int(ne.Uint16(hdr[10:]))}
	overflow := uint64(ne.Uint32(hdr[12:]))
	if overflow >= r.meta.pgid-id {
		return page{}, corruptf("page %d: %d overflow pages run past page %d", id, overflow, r.meta.pgid)
	}
	if (overflow+1)*ps > maxSpan {
		return page{}, fmt.Errorf("page %d spans %d bytes, more than the %d this check supports", id, (overflow+1)*ps, maxSpan)
	}
	if mark {
		for i := id; i <= id+overflow; i++ {
			if r.seen.has(i) {
				return page{}, corruptf("page %d: multiple references", i)
			}
			r.seen.set(i)
		}
	} else {
		if r.visited.has(id) {
			return page{}, corruptf("page %d: multiple references", id)
		}
		r.visited.set(id)
	}
	b, aliased, err := r.span(id, overflow+1, depth)
	if err != nil {
		return page{}, err
	}
	p.b = b
	if p.flags == branchPage || p.flags == leafPage {
		if pageHeaderSize+p.count*elementSize > len(b) {
			return page{}, corruptf("page %d: %d elements overflow the page", id, p.count)
		}
	}
	// A leaf page without buckets is used up before the next read (visitors
	// do not read pages for plain records): it may stay in the window,
	// saving a copy of most of the file. Pages that outlive reads below
	// them (branches, leaves holding buckets) get the depth's buffer.
	if aliased && (p.flags != leafPage || p.hasBuckets()) {
		p.b = r.buf(depth, uint64(len(b)))
		copy(p.b, b)
	}
	return p, nil
}

// hasBuckets says whether a leaf page holds bucket elements.
func (p page) hasBuckets() bool {
	for i := range p.count {
		if ne.Uint32(p.b[pageHeaderSize+i*elementSize:])&bucketLeaf != 0 {
			return true
		}
	}
	return false
}

// branchElem returns the key and child page of element i of a branch page.
func (p page) branchElem(i int) ([]byte, uint64, error) {
	e := pageHeaderSize + i*elementSize
	pos, ksize := uint64(ne.Uint32(p.b[e:])), uint64(ne.Uint32(p.b[e+4:]))
	if uint64(e)+pos+ksize > uint64(len(p.b)) {
		return nil, 0, corruptf("page %d: branch element %d outside the page", p.id, i)
	}
	return p.b[uint64(e)+pos : uint64(e)+pos+ksize], ne.Uint64(p.b[e+8:]), nil
}

// leafElem returns the key and value of element i of a leaf page and
// whether the value is a bucket.
func (p page) leafElem(i int) (k, v []byte, bucket bool, err error) {
	e := pageHeaderSize + i*elementSize
	flags := ne.Uint32(p.b[e:])
	pos, ksize, vsize := uint64(ne.Uint32(p.b[e+4:])), uint64(ne.Uint32(p.b[e+8:])), uint64(ne.Uint32(p.b[e+12:]))
	ks := uint64(e) + pos
	if ks+ksize+vsize > uint64(len(p.b)) {
		return nil, nil, false, corruptf("page %d: leaf element %d outside the page", p.id, i)
	}
	return p.b[ks : ks+ksize], p.b[ks+ksize : ks+ksize+vsize], flags&bucketLeaf != 0, nil
}

// inlinePage returns the page held inside an inline bucket value; id is
// the page that holds the value.
func inlinePage(id uint64, v []byte) (page, error) {
	if len(v) < bucketHeaderSize+pageHeaderSize {
		return page{}, corruptf("page %d: inline bucket of %d bytes", id, len(v))
	}
	b := v[bucketHeaderSize:]
	p := page{id: id, b: b, flags: ne.Uint16(b[8:]), count: int(ne.Uint16(b[10:]))}
	if p.flags != leafPage {
		return page{}, corruptf("page %d: inline bucket page type %#x", id, p.flags)
	}
	if pageHeaderSize+p.count*elementSize > len(b) {
		return page{}, corruptf("page %d: inline bucket: %d elements overflow it", id, p.count)
	}
	return p, nil
}

// visitFunc receives the elements of a bucket in key order: key, value
// (nil for a nested bucket, whose header is in bucketVal) and the depth of
// the buffer holding them, below which nested walks must not load.
type visitFunc func(k, v []byte, bucketVal []byte, depth int) error

// walkBucket checks the bucket whose value (header) is v and visits its
// elements. depth is the first buffer it may use.
func (r *reader) walkBucket(id uint64, v []byte, depth int, visit visitFunc) error {
	if len(v) < bucketHeaderSize {
		return corruptf("page %d: bucket value of %d bytes", id, len(v))
	}
	if root := ne.Uint64(v); root != 0 {
		_, err := r.walkTree(root, depth, nil, nil, visit)
		return err
	}
	p, err := inlinePage(id, v)
	if err != nil {
		return err
	}
	_, err = r.walkLeaf(p, depth, nil, nil, visit)
	return err
}

// walkTree checks the tree rooted at page id, whose keys must lie in
// [lo, hi) (nil: unbounded), visits its elements and returns its largest
// key. The key order rules are tx.Check's (recursivelyCheckPageKeyOrder).
func (r *reader) walkTree(id uint64, depth int, lo, hi []byte, visit visitFunc) ([]byte, error) {
	p, err := r.load(id, depth, true)
	if err != nil {
		return nil, err
	}
	return r.walkPage(p, depth, lo, hi, visit)
}

// walkPage is walkTree on a page already loaded into the buffer for depth.
func (r *reader) walkPage(p page, depth int, lo, hi []byte, visit visitFunc) ([]byte, error) {
	switch p.flags {
	case branchPage:
		if p.count == 0 {
			return nil, corruptf("page %d: empty branch page", p.id)
		}
		return r.walkBranch(p, depth, lo, hi, 0, p.count, visit)
	case leafPage:
		return r.walkLeaf(p, depth, lo, hi, visit)
	default:
		return nil, corruptf("page %d: type %#x is not a branch or leaf page", p.id, p.flags)
	}
}

// walkBranch walks the children [from, to) of branch page p. running is
// the bound the first child's key must not be below (lo, or the largest key
// of child from-1); when from > 0 and running is nil, the caller checks
// that bound itself.
func (r *reader) walkBranch(p page, depth int, running, hi []byte, from, to int, visit visitFunc) ([]byte, error) {
	var last []byte
	for i := from; i < to; i++ {
		k, child, err := p.branchElem(i)
		if err != nil {
			return nil, err
		}
		if i > from || from == 0 || running != nil {
			if err := keyOrder(p.id, i, k, running, hi); err != nil {
				return nil, err
			}
		}
		next := hi
		if i+1 < p.count {
			if next, _, err = p.branchElem(i + 1); err != nil {
				return nil, err
			}
		}
		if last, err = r.walkTree(child, depth+1, k, next, visit); err != nil {
			return nil, err
		}
		// The child's buffers are reused by its next sibling: keep a copy.
		r.keyBuf[depth] = append(r.keyBuf[depth][:0], last...)
		running, last = r.keyBuf[depth], r.keyBuf[depth]
	}
	return last, nil
}

// walkLeaf checks and visits the elements of a leaf page held in the
// buffer for depth.
func (r *reader) walkLeaf(p page, depth int, lo, hi []byte, visit visitFunc) ([]byte, error) {
	running := lo
	var last []byte
	for i := range p.count {
		k, v, bucket, err := p.leafElem(i)
		if err != nil {
			return nil, err
		}
		if err := keyOrder(p.id, i, k, running, hi); err != nil {
			return nil, err
		}
		running, last = k, k
		if bucket {
			if err := visit(k, nil, v, depth); err != nil {
				return nil, err
			}
			continue
		}
		if err := visit(k, v, nil, depth); err != nil {
			return nil, err
		}
	}
	return last, nil
}

// keyOrder is bbolt's verifyKeyOrder: element i with key k on page id
// follows prev (the previous key, or the lower bound for i == 0) and is
// below hi.
func keyOrder(id uint64, i int, k, prev, hi []byte) error {
	if i == 0 && prev != nil && bytes.Compare(prev, k) > 0 {
		return corruptf("page %d: first key %x below its lower bound %x", id, k, prev)
	}
	if i > 0 && bytes.Compare(prev, k) >= 0 {
		return corruptf("page %d: key %d (%x) not above the previous key %x", id, i, k, prev)
	}
	if hi != nil && bytes.Compare(k, hi) >= 0 {
		return corruptf("page %d: key %d (%x) not below its upper bound %x", id, i, k, hi)
	}
	return nil
}

// checkNested checks a nested bucket (one etcd does not create) without
// visiting its elements.
func (r *reader) checkNested(id uint64, v []byte, depth int) error {
	var visit visitFunc
	visit = func(_, _, bucketVal []byte, d int) error {
		if bucketVal != nil {
			return r.checkNested(id, bucketVal, d+1)
		}
		return nil
	}
	return r.walkBucket(id, v, depth, visit)
}

// checkFreelist applies tx.Check's freelist rules once the tree has been
// walked: the freelist page is a freelist, no page is freed twice or both
// freed and in use, and every page below the high water mark is one or the
// other. A file without a stored freelist (etcd's snapshots) has nothing to
// check: bbolt then takes every page not in use as free.
func (r *reader) checkFreelist() error {
	id := r.meta.freelist
	if id == noFreelist {
		return nil
	}
	p, err := r.load(id, 0, true)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	if p.flags != freelistPage {
		return corruptf("freelist page %d: type %#x", id, p.flags)
	}
	n, first := uint64(p.count), uint64(0)
	if p.count == 0xFFFF {
		n, first = ne.Uint64(p.b[pageHeaderSize:]), 1
	}
	if avail := uint64(len(p.b)-pageHeaderSize) / 8; n > avail || first+n > avail {
		return corruptf("freelist page %d: %d ids overflow the page", id, n)
	}
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = ne.Uint64(p.b[pageHeaderSize+(first+uint64(i))*8:])
	}
	slices.Sort(ids)
	var findings []string
	note := func(format string, args ...any) {
		if len(findings) < maxFreelistErrors {
			findings = append(findings, fmt.Sprintf(format, args...))
		}
	}
	freed := newBitmap(r.meta.pgid)
	for i, free := range ids {
		if i > 0 && ids[i-1] == free {
			note("page %d: already freed", free)
		}
		if free < r.meta.pgid {
			if r.seen.has(free) {
				note("page %d: reachable freed", free)
			}
			freed.set(free)
		}
	}
	for i := range r.meta.pgid {
		if !r.seen.has(i) && !freed.has(i) {
			note("page %d: unreachable unfreed", i)
		}
	}
	if len(findings) > 0 {
		return corruptf("freelist: %s", joinFindings(findings))
	}
	return nil
}

func joinFindings(s []string) string {
	var b bytes.Buffer
	for i, f := range s {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(f)
	}
	return b.String()
}

// lookup returns a copy of the value of key in the bucket whose header is
// v, or nil if absent. It follows one path down the tree; depth is the
// first buffer it may use.
func (r *reader) lookup(v []byte, key []byte, depth int) ([]byte, bool, error) {
	if len(v) < bucketHeaderSize {
		return nil, false, corruptf("bucket value of %d bytes", len(v))
	}
	r.visited = newBitmap(r.meta.pgid)
	var p page
	var err error
	if root := ne.Uint64(v); root == 0 {
		if p, err = inlinePage(0, v); err != nil {
			return nil, false, err
		}
	} else if p, err = r.load(root, depth, false); err != nil {
		return nil, false, err
	}
	for p.flags == branchPage {
		if p.count == 0 {
			return nil, false, corruptf("page %d: empty branch page", p.id)
		}
		// The last element whose key is <= key, else the first (bbolt's
		// cursor search).
		child := uint64(0)
		for i := range p.count {
			k, c, err := p.branchElem(i)
			if err != nil {
				return nil, false, err
			}
			if i > 0 && bytes.Compare(k, key) > 0 {
				break
			}
			child = c
		}
		depth++
		if p, err = r.load(child, depth, false); err != nil {
			return nil, false, err
		}
	}
	if p.flags != leafPage {
		return nil, false, corruptf("page %d: type %#x is not a branch or leaf page", p.id, p.flags)
	}
	for i := range p.count {
		k, val, bucket, err := p.leafElem(i)
		if err != nil {
			return nil, false, err
		}
		if bytes.Equal(k, key) {
			return bytes.Clone(val), bucket, nil
		}
	}
	return nil, false, nil
}

// scanFrom visits, in order, the elements with key >= from of the bucket
// whose header is v, reading only the pages that can hold them.
func (r *reader) scanFrom(v []byte, from []byte, depth int, fn func(k, v []byte) error) error {
	if len(v) < bucketHeaderSize {
		return corruptf("bucket value of %d bytes", len(v))
	}
	r.visited = newBitmap(r.meta.pgid)
	root := ne.Uint64(v)
	if root == 0 {
		p, err := inlinePage(0, v)
		if err != nil {
			return err
		}
		return scanLeaf(p, from, fn)
	}
	return r.scanTree(root, from, depth, fn)
}

func (r *reader) scanTree(id uint64, from []byte, depth int, fn func(k, v []byte) error) error {
	p, err := r.load(id, depth, false)
	if err != nil {
		return err
	}
	return r.scanPage(p, from, depth, fn)
}

// scanPage is scanTree on a page already loaded into the buffer for depth.
func (r *reader) scanPage(p page, from []byte, depth int, fn func(k, v []byte) error) error {
	switch p.flags {
	case branchPage:
		return r.scanBranch(p, from, depth, firstChildFrom(p, from), p.count, fn)
	case leafPage:
		return scanLeaf(p, from, fn)
	default:
		return corruptf("page %d: type %#x is not a branch or leaf page", p.id, p.flags)
	}
}

// firstChildFrom returns the first child of branch page p that can hold
// keys >= from: the child holds keys below the next separator. A damaged
// element ends the search there; scanBranch then reports it.
func firstChildFrom(p page, from []byte) int {
	for i := 0; i+1 < p.count; i++ {
		next, _, err := p.branchElem(i + 1)
		if err != nil || bytes.Compare(next, from) > 0 {
			return i
		}
	}
	return max(p.count-1, 0)
}

// scanBranch scans the children [lo, hi) of branch page p.
func (r *reader) scanBranch(p page, from []byte, depth, lo, hi int, fn func(k, v []byte) error) error {
	for i := lo; i < hi; i++ {
		_, child, err := p.branchElem(i)
		if err != nil {
			return err
		}
		if err := r.scanTree(child, from, depth+1, fn); err != nil {
			return err
		}
	}
	return nil
}

func scanLeaf(p page, from []byte, fn func(k, v []byte) error) error {
	for i := range p.count {
		k, v, bucket, err := p.leafElem(i)
		if err != nil {
			return err
		}
		if bucket || bytes.Compare(k, from) < 0 {
			continue
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}
