package inspect

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// The index of one cached snapshot: the live keys at the snapshot's
// revision in key order, each with the revision key of its newest record
// in the key bucket, so that get reads one path of the bbolt tree and ls
// reads no page of the snapshot at all.
//
//	"LBIDX2\n"
//	records: uvarint len, key, uvarint main, uvarint sub, varint create,
//	         varint version, varint lease, uvarint size, u64 xxhash64,
//	         uvarint len, encoding
//	offsets: u64 LE per record (from the file's start)
//	footer:  u64 count, i64 revision, u64 offsets start, [32]byte the
//	         snapshot's sha256 (hex, first 32 chars), "LBIDX2\n"

const (
	indexMagic  = "LBIDX2\n"
	footerSize  = 8 + 8 + 8 + 32 + len(indexMagic)
	maxKeyBytes = 1 << 20
)

// Entry is one live key of a snapshot.
type Entry struct {
	Key            string
	ModRevision    int64
	Sub            int64 // sub revision of the record within ModRevision
	CreateRevision int64
	Version        int64
	Lease          int64
	// Size is the stored value's length, CRC its 64-bit xxHash: diff
	// compares values by them without reading the snapshot.
	Size int64
	CRC  uint64
	// Encoding is how the value is stored: see Sniff.
	Encoding string
}

func (e *Entry) revKey() []byte {
	k := make([]byte, 17)
	binary.BigEndian.PutUint64(k, uint64(e.ModRevision))
	k[8] = '_'
	binary.BigEndian.PutUint64(k[9:], uint64(e.Sub))
	return k
}

// runBudget bounds the memory of one walker's sorted run while the index
// is built: records are sorted in runs of about this many bytes (2 MiB per
// walker of the key bucket, one or two), written to temporary files and
// merged, so building the index of a database of any size takes a few MiB.
var runBudget = 2 << 20

// runRec is a record of the key bucket while runs are built: the newest
// record of a key is the one with the largest (ModRevision, Sub), set for
// tombstones too.
type runRec struct {
	tomb bool
	e    Entry
}

// newer says whether a is a later record than b.
func (a *runRec) newer(b *runRec) bool {
	if a.e.ModRevision != b.e.ModRevision {
		return a.e.ModRevision > b.e.ModRevision
	}
	return a.e.Sub > b.e.Sub
}

// indexBuilder builds the index of a snapshot from the records of its key
// bucket, in any number of parts each fed in revision order (the walkers
// of verify.FileRecords, or one Keys.Scan): it is the verify.Records the
// file check hands its records to, so that fetching a backup into the
// cache reads the file once for both.
type indexBuilder struct {
	ctx    context.Context
	tmpDir string
	mu     sync.Mutex
	runs   []*os.File
	parts  []*runPart
	err    error // the first error of a part: the index's, not the file check's
}

func newIndexBuilder(ctx context.Context, tmpDir string) *indexBuilder {
	return &indexBuilder{ctx: ctx, tmpDir: tmpDir}
}

// Walker returns the receiver of one part's records (verify.Records).
func (b *indexBuilder) Walker() func(rk, v []byte) error {
	p := &runPart{b: b, chunk: make([]runRec, 0, runBudget/200)}
	b.mu.Lock()
	b.parts = append(b.parts, p)
	b.mu.Unlock()
	return func(rk, v []byte) error {
		err := p.add(rk, v)
		if err != nil {
			b.mu.Lock()
			if b.err == nil {
				b.err = err
			}
			b.mu.Unlock()
		}
		return err
	}
}

// failed returns the first error a part met, if any: when the file check
// fails with it, the index failed, not the snapshot.
func (b *indexBuilder) failed() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// Restart forgets every record received (verify.Records).
func (b *indexBuilder) Restart() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeRuns()
	b.parts, b.err = nil, nil
}

func (b *indexBuilder) removeRuns() {
	for _, f := range b.runs {
		f.Close()
		os.Remove(f.Name())
	}
	b.runs = nil
}

// close removes the temporary files.
func (b *indexBuilder) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.removeRuns()
}

// finish writes the index of every record received to w and returns the
// number of live keys. Call it once all parts are done.
func (b *indexBuilder) finish(rev int64, sha string, w io.Writer) (int, error) {
	for _, p := range b.parts {
		if err := p.flush(); err != nil {
			return 0, err
		}
	}
	return mergeRuns(b.runs, rev, sha, w)
}

// runPart is one part's records not yet in a run.
type runPart struct {
	b     *indexBuilder
	chunk []runRec
	size  int
	kv    verify.KeyValue
}

func (p *runPart) add(rk, v []byte) error {
	if len(rk) != 17 && len(rk) != 18 || rk[8] != '_' {
		return fmt.Errorf("%w: revision key %x", verify.ErrCorrupt, rk)
	}
	kv := &p.kv
	if err := verify.ParseKeyValue(v, kv); err != nil {
		return fmt.Errorf("%w: record at revision key %x: %w", verify.ErrCorrupt, rk, err)
	}
	r := runRec{tomb: len(rk) == 18 && rk[17] == 't', e: Entry{
		Key:         string(kv.Key),
		ModRevision: int64(binary.BigEndian.Uint64(rk[:8])),
		Sub:         int64(binary.BigEndian.Uint64(rk[9:17])),
	}}
	if !r.tomb {
		r.e.CreateRevision, r.e.Version, r.e.Lease = kv.CreateRevision, kv.Version, kv.Lease
		r.e.Size = int64(len(kv.Value))
		r.e.CRC = xxhash.Sum64(kv.Value)
		r.e.Encoding = Sniff(kv.Value)
	}
	p.chunk = append(p.chunk, r)
	if p.size += len(r.e.Key) + len(r.e.Encoding) + 160; p.size >= runBudget {
		return p.flush()
	}
	return nil
}

// flush sorts the part's records by key, keeps the newest of each and
// writes them to a new run file.
func (p *runPart) flush() error {
	if len(p.chunk) == 0 {
		return nil
	}
	if err := p.b.ctx.Err(); err != nil {
		return err
	}
	chunk := p.chunk
	slices.SortFunc(chunk, func(a, b runRec) int {
		if c := strings.Compare(a.e.Key, b.e.Key); c != 0 {
			return c
		}
		if a.newer(&b) {
			return 1
		}
		return -1
	})
	f, err := os.CreateTemp(p.b.tmpDir, ".index-run-")
	if err != nil {
		return fmt.Errorf("index: %w", err)
	}
	p.b.mu.Lock()
	p.b.runs = append(p.b.runs, f)
	p.b.mu.Unlock()
	bw := bufio.NewWriterSize(f, 1<<16)
	var buf, lb []byte
	for i := range chunk {
		r := &chunk[i]
		if i+1 < len(chunk) && chunk[i+1].e.Key == r.e.Key {
			continue // a newer record of the key follows
		}
		buf = buf[:0]
		if r.tomb {
			buf = append(buf, 1)
		} else {
			buf = append(buf, 0)
		}
		buf = appendEntry(buf, &r.e)
		lb = binary.AppendUvarint(lb[:0], uint64(len(buf)))
		bw.Write(lb)
		bw.Write(buf)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("index: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	clear(chunk)
	p.chunk, p.size = chunk[:0], 0
	return nil
}

// buildIndex scans the key bucket of the snapshot at dbPath once and
// writes the index of its live keys to w (for a snapshot already checked:
// a cached copy whose index is missing, a snapshot built by replay).
// Sorted runs go to temporary files in tmpDir.
func buildIndex(ctx context.Context, dbPath string, rev int64, sha string, tmpDir string, w io.Writer) (int, error) {
	keys, err := verify.OpenKeys(ctx, dbPath)
	if err != nil {
		return 0, err
	}
	defer keys.Close()
	b := newIndexBuilder(ctx, tmpDir)
	defer b.close()
	if err := keys.Scan(ctx, b.Walker()); err != nil {
		return 0, err
	}
	return b.finish(rev, sha, w)
}

// A run file holds records sorted by key, one per key: uvarint length,
// then a tombstone byte (1) or not (0) and the entry as the index stores
// it (appendEntry), so that the merge copies the chosen bytes as they are.
type runReader struct {
	r        *bufio.Reader
	buf      []byte // the current record: tombstone byte, entry
	key      []byte // its key, in buf
	mod, sub uint64
	ok       bool
}

func (rr *runReader) next() error {
	n, err := binary.ReadUvarint(rr.r)
	if err == io.EOF {
		rr.ok = false
		return nil
	}
	if err != nil {
		return err
	}
	if n < 2 || n > maxKeyBytes+1024 {
		return fmt.Errorf("%w: run record of %d bytes", errIndex, n)
	}
	rr.buf = slices.Grow(rr.buf[:0], int(n))[:n]
	if _, err := io.ReadFull(rr.r, rr.buf); err != nil {
		return err
	}
	b := rr.buf[1:]
	kl, m := binary.Uvarint(b)
	if m <= 0 || kl > uint64(len(b)-m) {
		return fmt.Errorf("%w: run record key", errIndex)
	}
	rr.key, b = b[m:m+int(kl)], b[m+int(kl):]
	var m2, m3 int
	rr.mod, m2 = binary.Uvarint(b)
	if m2 > 0 {
		rr.sub, m3 = binary.Uvarint(b[m2:])
	}
	if m2 <= 0 || m3 <= 0 {
		return fmt.Errorf("%w: run record revision", errIndex)
	}
	rr.ok = true
	return nil
}

// newer says whether rr's record is later than o's.
func (rr *runReader) newer(o *runReader) bool {
	if rr.mod != o.mod {
		return rr.mod > o.mod
	}
	return rr.sub > o.sub
}

// mergeRuns merges the sorted runs (each holding one record per key, its
// newest in that run) and writes the index: for each key its newest record,
// unless it is a tombstone.
func mergeRuns(runs []*os.File, rev int64, sha string, w io.Writer) (int, error) {
	rs := make([]*runReader, 0, len(runs))
	for _, f := range runs {
		rr := &runReader{r: bufio.NewReaderSize(f, 1<<16)}
		if err := rr.next(); err != nil {
			return 0, fmt.Errorf("index: read run: %w", err)
		}
		if rr.ok {
			rs = append(rs, rr)
		}
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	bw.WriteString(indexMagic)
	pos := uint64(len(indexMagic))
	var offsets []uint64
	var best, key []byte
	for len(rs) > 0 {
		// The smallest key among the runs' heads (runs are few: a linear
		// scan is as fast as a heap here).
		top := rs[0]
		for _, rr := range rs[1:] {
			if bytes.Compare(rr.key, top.key) < 0 {
				top = rr
			}
		}
		key = append(key[:0], top.key...)
		var newest *runReader
		for _, rr := range rs {
			if bytes.Equal(rr.key, key) && (newest == nil || rr.newer(newest)) {
				newest = rr
			}
		}
		best = append(best[:0], newest.buf...)
		for i := 0; i < len(rs); {
			rr := rs[i]
			if !bytes.Equal(rr.key, key) {
				i++
				continue
			}
			if err := rr.next(); err != nil {
				return 0, fmt.Errorf("index: read run: %w", err)
			}
			if !rr.ok {
				rs = slices.Delete(rs, i, i+1)
				continue
			}
			i++
		}
		if best[0] == 1 {
			continue // a tombstone: the key is not live
		}
		offsets = append(offsets, pos)
		pos += uint64(len(best) - 1)
		bw.Write(best[1:])
	}
	start := pos
	var b8 [8]byte
	for _, o := range offsets {
		binary.LittleEndian.PutUint64(b8[:], o)
		bw.Write(b8[:])
	}
	binary.LittleEndian.PutUint64(b8[:], uint64(len(offsets)))
	bw.Write(b8[:])
	binary.LittleEndian.PutUint64(b8[:], uint64(rev))
	bw.Write(b8[:])
	binary.LittleEndian.PutUint64(b8[:], start)
	bw.Write(b8[:])
	bw.WriteString(shaTag(sha))
	bw.WriteString(indexMagic)
	return len(offsets), bw.Flush()
}

func shaTag(sha string) string {
	return (sha + strings.Repeat("0", 32))[:32]
}

func appendEntry(b []byte, e *Entry) []byte {
	b = binary.AppendUvarint(b, uint64(len(e.Key)))
	b = append(b, e.Key...)
	b = binary.AppendUvarint(b, uint64(e.ModRevision))
	b = binary.AppendUvarint(b, uint64(e.Sub))
	b = binary.AppendVarint(b, e.CreateRevision)
	b = binary.AppendVarint(b, e.Version)
	b = binary.AppendVarint(b, e.Lease)
	b = binary.AppendUvarint(b, uint64(e.Size))
	b = binary.LittleEndian.AppendUint64(b, e.CRC)
	b = binary.AppendUvarint(b, uint64(len(e.Encoding)))
	return append(b, e.Encoding...)
}

var errIndex = errors.New("damaged index")

func readEntry(r *bufio.Reader, e *Entry) error {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return err
	}
	if n > maxKeyBytes {
		return fmt.Errorf("%w: key of %d bytes", errIndex, n)
	}
	kb := make([]byte, n)
	if _, err := io.ReadFull(r, kb); err != nil {
		return err
	}
	e.Key = string(kb)
	u := func() int64 {
		v, e2 := binary.ReadUvarint(r)
		if err == nil {
			err = e2
		}
		return int64(v)
	}
	s := func() int64 {
		v, e2 := binary.ReadVarint(r)
		if err == nil {
			err = e2
		}
		return v
	}
	e.ModRevision, e.Sub = u(), u()
	e.CreateRevision, e.Version, e.Lease = s(), s(), s()
	e.Size = u()
	var b8 [8]byte
	if _, e2 := io.ReadFull(r, b8[:]); err == nil {
		err = e2
	}
	e.CRC = binary.LittleEndian.Uint64(b8[:])
	el := u()
	if err != nil {
		return err
	}
	if el > 256 {
		return fmt.Errorf("%w: encoding of %d bytes", errIndex, el)
	}
	eb := make([]byte, el)
	if _, err := io.ReadFull(r, eb); err != nil {
		return err
	}
	e.Encoding = string(eb)
	return nil
}

// index reads an index file with pread: a lookup is a binary search over
// the offsets table, a prefix listing one sequential read from its first
// record.
type index struct {
	f        *os.File
	count    int64
	revision int64
	start    int64 // offsets table
	sha      string
}

func openIndex(path, sha string) (*index, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	ix, err := readFooter(f, fi.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("index %s: %w", path, err)
	}
	if ix.sha != shaTag(sha) {
		f.Close()
		return nil, fmt.Errorf("index %s: %w: made for another snapshot", path, errIndex)
	}
	return ix, nil
}

func readFooter(f *os.File, size int64) (*index, error) {
	if size < int64(len(indexMagic)+footerSize) {
		return nil, fmt.Errorf("%w: %d bytes", errIndex, size)
	}
	b := make([]byte, footerSize)
	if _, err := f.ReadAt(b, size-int64(footerSize)); err != nil {
		return nil, err
	}
	if string(b[footerSize-len(indexMagic):]) != indexMagic {
		return nil, fmt.Errorf("%w: no footer", errIndex)
	}
	ix := &index{
		f:        f,
		count:    int64(binary.LittleEndian.Uint64(b)),
		revision: int64(binary.LittleEndian.Uint64(b[8:])),
		start:    int64(binary.LittleEndian.Uint64(b[16:])),
		sha:      string(b[24:56]),
	}
	if ix.count < 0 || ix.start < int64(len(indexMagic)) || ix.start+8*ix.count != size-int64(footerSize) {
		return nil, fmt.Errorf("%w: footer does not match the file's size", errIndex)
	}
	return ix, nil
}

func (ix *index) close() error { return ix.f.Close() }

func (ix *index) offset(i int64) (int64, error) {
	var b [8]byte
	if _, err := ix.f.ReadAt(b[:], ix.start+8*i); err != nil {
		return 0, err
	}
	o := int64(binary.LittleEndian.Uint64(b[:]))
	if o < int64(len(indexMagic)) || o >= ix.start {
		return 0, fmt.Errorf("%w: record offset %d", errIndex, o)
	}
	return o, nil
}

func (ix *index) reader(off int64) *bufio.Reader {
	return bufio.NewReaderSize(io.NewSectionReader(ix.f, off, ix.start-off), 1<<15)
}

// keyAt reads the key of record i (binary search step).
func (ix *index) keyAt(i int64) (string, error) {
	o, err := ix.offset(i)
	if err != nil {
		return "", err
	}
	r := bufio.NewReaderSize(io.NewSectionReader(ix.f, o, ix.start-o), 512)
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return "", err
	}
	if n > maxKeyBytes {
		return "", fmt.Errorf("%w: key of %d bytes", errIndex, n)
	}
	kb := make([]byte, n)
	if _, err := io.ReadFull(r, kb); err != nil {
		return "", err
	}
	return string(kb), nil
}

// search returns the first record whose key is >= key.
func (ix *index) search(key string) (int64, error) {
	lo, hi := int64(0), ix.count
	for lo < hi {
		mid := int64(uint64(lo+hi) >> 1)
		k, err := ix.keyAt(mid)
		if err != nil {
			return 0, err
		}
		if k < key {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// get returns the entry of key, or false.
func (ix *index) get(key string) (Entry, bool, error) {
	var e Entry
	i, err := ix.search(key)
	if err != nil || i >= ix.count {
		return e, false, err
	}
	o, err := ix.offset(i)
	if err != nil {
		return e, false, err
	}
	if err := readEntry(ix.reader(o), &e); err != nil {
		return e, false, fmt.Errorf("%w: %w", errIndex, err)
	}
	return e, e.Key == key, nil
}

// scan calls fn with each entry whose key starts with prefix, in key order.
func (ix *index) scan(prefix string, fn func(*Entry) error) error {
	next, err := ix.iter(prefix)
	if err != nil {
		return err
	}
	for {
		e, err := next()
		if err != nil || e == nil {
			return err
		}
		if err := fn(e); err != nil {
			return err
		}
	}
}

// iter returns a function that returns the entries under prefix one by
// one, then nil. The entry is reused.
func (ix *index) iter(prefix string) (func() (*Entry, error), error) {
	i, err := ix.search(prefix)
	if err != nil {
		return nil, err
	}
	if i >= ix.count {
		return func() (*Entry, error) { return nil, nil }, nil
	}
	o, err := ix.offset(i)
	if err != nil {
		return nil, err
	}
	r := ix.reader(o)
	var e Entry
	return func() (*Entry, error) {
		if i >= ix.count {
			return nil, nil
		}
		if err := readEntry(r, &e); err != nil {
			return nil, fmt.Errorf("%w: %w", errIndex, err)
		}
		i++
		if !strings.HasPrefix(e.Key, prefix) {
			i = ix.count
			return nil, nil
		}
		return &e, nil
	}, nil
}

// Sniff names how a stored value is encoded, from its first bytes:
// "protobuf" (kube-apiserver's k8s\0 envelope), "json", "encrypted:<provider>:<key>"
// for kube-apiserver's encryption at rest (k8s:enc:…), or "raw".
func Sniff(v []byte) string {
	switch {
	case bytes.HasPrefix(v, protobufMagic):
		return "protobuf"
	case bytes.HasPrefix(v, encPrefix):
		p, err := parseEncrypted(v)
		if err != nil {
			return "encrypted:?"
		}
		return "encrypted:" + p.provider + ":" + p.key
	case looksJSON(v):
		return "json"
	}
	return "raw"
}
