package verify_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"
	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

var update = flag.Bool("update", false, "regenerate testdata/*.db from a real etcd (run with -run TestFixtures)")

// markerValue is a value in small.db whose bytes flipped-value.db changes.
const markerValue = "lifeboat-fixture-marker-value"

// fixture returns a private copy of testdata/name.
func fixture(tb testing.TB, name string) string {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		tb.Fatalf("fixture %s: %v (regenerate with go test ./verify -run TestFixtures -update)", name, err)
	}
	return writeTemp(tb, b)
}

func writeTemp(tb testing.TB, b []byte) string {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "snapshot.db")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}

// generateFixtures writes testdata/*.db from a snapshot of a real etcd.
func generateFixtures(t *testing.T) {
	ctx := t.Context()
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := c.Client(t)
	h := history{tb: t, ctx: ctx, cli: cli}
	h.puts("/registry/pods/default/p", 120, 100)
	h.put("/registry/configmaps/default/marker", markerValue)
	mid := h.puts("/registry/pods/default/p", 20, 110)
	h.del("/registry/pods/default/p0003")
	h.compact(mid)
	h.puts("/registry/events/default/e", 10, 80)
	small, err := os.ReadFile(saveSnapshot(t, ctx, c.ClientConfig(), c.Members[0].ClientURL, t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	db := small[:len(small)-sha256.Size]

	i := bytes.Index(small, []byte(markerValue))
	if i < 0 {
		t.Fatal("marker value not found in the snapshot")
	}
	flippedValue := bytes.Clone(small)
	flippedValue[i+3] ^= 0x01

	// The page holding the marker is a leaf page of the key bucket: make its
	// type invalid.
	pageSize := int(binary.NativeEndian.Uint32(small[16+8:]))
	flippedPage := bytes.Clone(small)
	flippedPage[(i/pageSize)*pageSize+8] ^= 0x40

	garbage := make([]byte, 64<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for j := range garbage {
		garbage[j] = byte(rng.Uint32())
	}

	for name, b := range map[string][]byte{
		"small.db":         small,
		"notrailer.db":     db,
		"truncated.db":     small[:len(small)/2],
		"flipped-value.db": flippedValue,
		"flipped-page.db":  flippedPage,
		"garbage.db":       garbage,
		"empty.db":         nil,
	} {
		if err := os.WriteFile(filepath.Join("testdata", name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFixtures checks the committed fixtures and what File and Trailer say
// about each.
func TestFixtures(t *testing.T) {
	if *update {
		generateFixtures(t)
	}
	ctx := t.Context()
	small, err := verify.File(ctx, fixture(t, "small.db"))
	if err != nil {
		t.Fatalf("File(small.db): %v", err)
	}
	if small.CompactRevision == 0 || small.TotalKeys == 0 || !small.HashKVComparable {
		t.Fatalf("small.db should be compacted, have keys and a comparable HashKV: %+v", small)
	}

	tests := []struct {
		name           string
		fileCorrupt    bool // File fails with ErrCorrupt; else it succeeds
		trailerCorrupt bool // Trailer fails with ErrCorrupt; else it succeeds
		check          func(t *testing.T, st verify.Status)
	}{
		{name: "small.db"},
		{name: "notrailer.db", trailerCorrupt: true, check: func(t *testing.T, st verify.Status) {
			if st != small {
				t.Errorf("status without trailer %+v, with %+v", st, small)
			}
		}},
		{name: "truncated.db", fileCorrupt: true, trailerCorrupt: true},
		{name: "flipped-value.db", trailerCorrupt: true, check: func(t *testing.T, st verify.Status) {
			// bbolt's structure is intact, the content is not: only the trailer
			// and the hashes tell.
			if st.BoltHash == small.BoltHash || st.HashKV == small.HashKV {
				t.Errorf("a flipped value byte left the hashes unchanged: %+v", st)
			}
		}},
		{name: "flipped-page.db", fileCorrupt: true, trailerCorrupt: true},
		{name: "garbage.db", fileCorrupt: true, trailerCorrupt: true},
		{name: "empty.db", fileCorrupt: true, trailerCorrupt: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fixture(t, tt.name)
			before := fileSHA256(t, path)
			st, err := verify.File(ctx, path)
			switch {
			case tt.fileCorrupt && !errors.Is(err, verify.ErrCorrupt):
				t.Errorf("File: %v, want ErrCorrupt", err)
			case !tt.fileCorrupt && err != nil:
				t.Errorf("File: %v", err)
			case err != nil && !strings.Contains(err.Error(), path):
				t.Errorf("File error %q does not name the file", err)
			case err == nil && tt.check != nil:
				tt.check(t, st)
			}
			_, err = verify.Trailer(ctx, path)
			if tt.trailerCorrupt != errors.Is(err, verify.ErrCorrupt) || (!tt.trailerCorrupt && err != nil) {
				t.Errorf("Trailer: %v, want corrupt: %v", err, tt.trailerCorrupt)
			}
			if after := fileSHA256(t, path); after != before {
				t.Errorf("the file changed")
			}
		})
	}
}

func TestFileMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.db")
	_, err := verify.File(t.Context(), path)
	if !errors.Is(err, fs.ErrNotExist) || errors.Is(err, verify.ErrCorrupt) || !strings.Contains(err.Error(), path) {
		t.Errorf("File(missing): %v, want a not-exist error naming %s", err, path)
	}
	_, err = verify.Trailer(t.Context(), path)
	if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), path) {
		t.Errorf("Trailer(missing): %v, want a not-exist error naming %s", err, path)
	}
	_, err = verify.File(t.Context(), t.TempDir())
	if err == nil || errors.Is(err, verify.ErrCorrupt) {
		t.Errorf("File(directory): %v, want an error", err)
	}
}

// boltFile gives access to the pages of a bbolt file in memory, to damage
// them the way a broken disk or a crafted file would.
type boltFile struct {
	b        []byte
	pageSize int
}

func (f boltFile) page(id uint64) []byte {
	return f.b[int(id)*f.pageSize : int(id+1)*f.pageSize]
}

// element returns element i of page id (branch or leaf).
func (f boltFile) element(id uint64, i int) []byte {
	return f.page(id)[16+16*i : 16+16*(i+1)]
}

// metaRewrite changes both meta pages with fn and fixes their checksums.
func (f boltFile) metaRewrite(fn func(m []byte)) {
	for id := range uint64(2) {
		m := f.page(id)[16 : 16+64]
		fn(m)
		h := fnv.New64a()
		h.Write(m[:56])
		binary.NativeEndian.PutUint64(m[56:], h.Sum64())
	}
}

// appendFreelist appends a freelist page listing ids after the last page
// and makes the meta pages use it; it returns the new page.
func (f *boltFile) appendFreelist(ids ...uint64) []byte {
	id := uint64(len(f.b) / f.pageSize)
	p := make([]byte, f.pageSize)
	binary.NativeEndian.PutUint64(p, id)
	binary.NativeEndian.PutUint16(p[8:], 0x10)
	binary.NativeEndian.PutUint16(p[10:], uint16(len(ids)))
	for i, free := range ids {
		binary.NativeEndian.PutUint64(p[16+8*i:], free)
	}
	f.b = append(f.b, p...)
	f.metaRewrite(func(m []byte) {
		binary.NativeEndian.PutUint64(m[32:], id)
		binary.NativeEndian.PutUint64(m[40:], id+1)
	})
	return f.page(id)
}

// keyBucketPages returns the root page of the key bucket of the bbolt file
// at path (a branch page in the fixtures) and its first child (a leaf).
func keyBucketPages(tb testing.TB, path string) (branch, leaf uint64) {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		branch = uint64(tx.Bucket([]byte("key")).RootPage())
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	pageSize := int(binary.NativeEndian.Uint32(b[16+8:]))
	f := boltFile{b: b, pageSize: pageSize}
	if flags := binary.NativeEndian.Uint16(f.page(branch)[8:]); flags != 0x01 {
		tb.Fatalf("key bucket root %d is not a branch page (flags %#x)", branch, flags)
	}
	leaf = binary.NativeEndian.Uint64(f.element(branch, 0)[8:])
	return branch, leaf
}

// TestFileDamagedPages damages single structures that bbolt follows
// blindly and expects ErrCorrupt, never a crash.
func TestFileDamagedPages(t *testing.T) {
	path := fixture(t, "notrailer.db")
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pageSize := int(binary.NativeEndian.Uint32(src[16+8:]))
	branch, leaf := keyBucketPages(t, path)
	put32 := binary.NativeEndian.PutUint32
	put64 := binary.NativeEndian.PutUint64

	// bboltToo marks damage that bbolt detects safely too; etcdutl's status
	// must fail on it. On the others bbolt reads outside its memory map, or
	// (etcd's files store no freelist, which bbolt rebuilds with a check in a
	// goroutine of its own) crashes the process on a page of the wrong type
	// or id, or races with itself and leaks a goroutine on misordered keys.
	const bboltToo = true
	tests := []struct {
		name     string
		damage   func(f *boltFile)
		bboltToo bool
	}{
		{"branch child out of range", func(f *boltFile) { put64(f.element(branch, 1)[8:], 1<<40) }, false},
		{"branch child is the branch", func(f *boltFile) { put64(f.element(branch, 1)[8:], branch) }, false},
		{"branch child referenced twice", func(f *boltFile) { put64(f.element(branch, 1)[8:], leaf) }, false},
		{"branch key far outside", func(f *boltFile) { put32(f.element(branch, 1), 1<<31) }, false},
		{"branch keys out of order", func(f *boltFile) {
			// The first separator key becomes larger than the second.
			k0 := f.page(branch)[16+binary.NativeEndian.Uint32(f.element(branch, 0)):]
			copy(k0[:8], bytes.Repeat([]byte{0x7f}, 8))
		}, false},
		{"leaf value far outside", func(f *boltFile) { put32(f.element(leaf, 1)[12:], 1<<31) }, false},
		{"leaf keys out of order", func(f *boltFile) {
			e := f.element(leaf, 1)
			k := f.page(leaf)[16+16+binary.NativeEndian.Uint32(e[4:]):]
			clear(k[:8]) // revision 0 sorts before element 0
		}, false},
		{"leaf count too large", func(f *boltFile) { binary.NativeEndian.PutUint16(f.page(leaf)[10:], 0xFFF0) }, false},
		{"leaf type invalid", func(f *boltFile) { binary.NativeEndian.PutUint16(f.page(leaf)[8:], 0x08) }, false},
		{"page overflow past the end", func(f *boltFile) { put32(f.page(leaf)[12:], 1<<30) }, false},
		{"page header names another page", func(f *boltFile) { put64(f.page(leaf), leaf+1) }, false},
		{"freelist page is a leaf", func(f *boltFile) {
			f.metaRewrite(func(m []byte) { put64(m[32:], leaf) })
		}, bboltToo},
		{"freelist count too large", func(f *boltFile) {
			p := f.appendFreelist()
			binary.NativeEndian.PutUint16(p[10:], 0xFFFF)
			put64(p[16:], 1<<60)
		}, false},
		// With a stored freelist, bbolt's own check finds pages both in use
		// and free, and pages neither in use nor free.
		{"freelist frees a page in use", func(f *boltFile) { f.appendFreelist(leaf) }, bboltToo},
		{"pages neither in use nor free", func(f *boltFile) { f.appendFreelist() }, bboltToo},
		{"high water mark past the end", func(f *boltFile) {
			f.metaRewrite(func(m []byte) { put64(m[40:], 1<<20) })
		}, false},
		{"root page out of range", func(f *boltFile) {
			f.metaRewrite(func(m []byte) { put64(m[16:], 1<<20) })
		}, false},
		{"meta page header names another page", func(f *boltFile) { put64(f.page(1), 1<<50) }, false},
		{"meta page type invalid", func(f *boltFile) { binary.NativeEndian.PutUint16(f.page(0)[8:], 0x08) }, false},
		{"both meta pages invalid", func(f *boltFile) {
			f.page(0)[20] ^= 1
			f.page(1)[20] ^= 1
		}, bboltToo},
		{"only the meta pages", func(f *boltFile) { clear(f.b[2*f.pageSize:]) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &boltFile{b: bytes.Clone(src), pageSize: pageSize}
			tt.damage(f)
			path := writeTemp(t, f.b)
			_, err := verify.File(t.Context(), path)
			if !errors.Is(err, verify.ErrCorrupt) {
				t.Errorf("File: %v, want ErrCorrupt", err)
			}
			t.Log(err)
			if tt.bboltToo {
				if _, err := snapshot.NewV3(zap.NewNop()).Status(path); err == nil {
					t.Errorf("etcdutl snapshot status accepts the file")
				}
			}
		})
	}
}

// TestFileCompactionUnfinished rewrites a snapshot so that a compaction is
// scheduled beyond the finished one, as in a snapshot taken while etcd
// compacts: the HashKV is then not comparable.
func TestFileCompactionUnfinished(t *testing.T) {
	path := fixture(t, "notrailer.db")
	st, err := verify.File(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		k := make([]byte, 17)
		binary.BigEndian.PutUint64(k, uint64(st.CompactRevision+5))
		k[8] = '_'
		return tx.Bucket([]byte("meta")).Put([]byte("scheduledCompactRev"), k)
	})
	if cerr := db.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	got, err := verify.File(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if got.HashKVComparable || got.HashKV != 0 || !strings.Contains(got.HashKVReason, "scheduled") {
		t.Errorf("unfinished compaction: comparable %v hash %#x reason %q", got.HashKVComparable, got.HashKV, got.HashKVReason)
	}
	if got.CompactRevision != st.CompactRevision || got.Revision != st.Revision || got.TotalKeys != st.TotalKeys {
		t.Errorf("status changed beyond HashKV: %+v, was %+v", got, st)
	}
	verdict, err := verify.CompareHashKV(got, st.HashKV, st.CompactRevision)
	if err != nil || !strings.HasPrefix(verdict, "not comparable: ") {
		t.Errorf("CompareHashKV = %q, %v", verdict, err)
	}
}

func TestCompareHashKV(t *testing.T) {
	st := verify.Status{Revision: 90, CompactRevision: 40, HashKV: 0xdeadbeef, HashKVComparable: true}
	tests := []struct {
		name        string
		st          verify.Status
		hash        uint32
		compactRev  int64
		want        string
		wantErr     error
		wantInError []string
	}{
		{name: "match", st: st, hash: 0xdeadbeef, compactRev: 40, want: "match"},
		{name: "mismatch", st: st, hash: 0x1, compactRev: 40, wantErr: verify.ErrHashKVMismatch,
			wantInError: []string{"0xdeadbeef", "0x00000001", "revision 90"}},
		{name: "compact revisions differ", st: st, hash: 0x1, compactRev: 50,
			want: "not comparable: member compact revision 50, snapshot compact revision 40"},
		{name: "snapshot not comparable",
			st:   verify.Status{Revision: 90, CompactRevision: 40, HashKVReason: "compaction to revision 45 scheduled but only 40 finished"},
			hash: 0x1, compactRev: 40, want: "not comparable: compaction to revision 45 scheduled but only 40 finished"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := verify.CompareHashKV(tt.st, tt.hash, tt.compactRev)
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("CompareHashKV error %v, want %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("CompareHashKV = %q, want %q", got, tt.want)
			}
			for _, s := range tt.wantInError {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

// slowReader hands out data a byte at a time and cancels ctx halfway.
type cancelReader struct {
	data   []byte
	off    int
	cancel context.CancelFunc
}

func (r *cancelReader) Read(p []byte) (int, error) {
	if r.off >= len(r.data) {
		return 0, fmt.Errorf("read past the end")
	}
	if r.off > len(r.data)/2 {
		r.cancel()
	}
	n := copy(p[:min(len(p), 4096)], r.data[r.off:])
	r.off += n
	return n, nil
}

func TestTrailerReader(t *testing.T) {
	db := bytes.Repeat([]byte("0123456789abcdef"), 1024) // 16 KiB
	sum := sha256.Sum256(db)
	good := append(bytes.Clone(db), sum[:]...)
	bad := bytes.Clone(good)
	bad[100] ^= 1
	short := sha256.Sum256(db[:len(db)-512])
	tests := []struct {
		name     string
		in       []byte
		wantSize int64
		wantErr  error
	}{
		{"good", good, int64(len(db)), nil},
		{"flipped byte", bad, 0, verify.ErrCorrupt},
		{"no trailer", db, 0, verify.ErrCorrupt},
		{"trailer of other data", append(bytes.Clone(db[:len(db)-512]), sum[:]...), 0, verify.ErrCorrupt},
		{"truncated", good[:len(good)-1], 0, verify.ErrCorrupt},
		{"only a trailer", short[:], 0, verify.ErrCorrupt},
		{"empty", nil, 0, verify.ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			digest, size, err := verify.TrailerReader(t.Context(), bytes.NewReader(tt.in))
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("TrailerReader: %v, want %v", err, tt.wantErr)
			}
			if tt.wantErr != nil {
				return
			}
			if size != tt.wantSize || digest != fmt.Sprintf("%x", sum) {
				t.Errorf("TrailerReader = %s, %d; want %x, %d", digest, size, sum, tt.wantSize)
			}
		})
	}

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		_, _, err := verify.TrailerReader(ctx, &cancelReader{data: good, cancel: cancel})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("TrailerReader: %v, want context.Canceled", err)
		}
	})
}

// rewrite copies the bbolt database at src into a new file with bbolt
// (bolt.Compact), with options o, then applies more to it.
func rewrite(t *testing.T, src string, o *bolt.Options, more func(db *bolt.DB) error) string {
	t.Helper()
	in, err := bolt.Open(src, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	path := filepath.Join(t.TempDir(), "rewritten.db")
	out, err := bolt.Open(path, 0o600, o)
	if err != nil {
		t.Fatal(err)
	}
	err = bolt.Compact(out, in, 0)
	if err == nil && more != nil {
		err = more(out)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestFilePageSizes checks databases with other page sizes than the
// machine's (etcd uses the OS page size: 64 KiB on some arm64 systems).
func TestFilePageSizes(t *testing.T) {
	want, err := verify.File(t.Context(), fixture(t, "notrailer.db"))
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{1024, 16 << 10, 64 << 10} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			path := rewrite(t, fixture(t, "notrailer.db"), &bolt.Options{PageSize: size, NoFreelistSync: true}, nil)
			got := checkAgainstEtcdutl(t, path)
			if got.Size%int64(size) != 0 {
				t.Errorf("size %d is not a multiple of the page size", got.Size)
			}
			got.Size, want.Size = 0, 0
			if got != want {
				t.Errorf("File = %+v, want %+v", got, want)
			}
		})
	}
}

// TestFileStoredFreelist checks a database that stores its freelist (etcd
// runs bbolt with NoFreelistSync, other writers may not): a copy of
// small.db rewritten by bbolt, with pages freed by a deleted bucket.
func TestFileStoredFreelist(t *testing.T) {
	want, err := verify.File(t.Context(), fixture(t, "notrailer.db"))
	if err != nil {
		t.Fatal(err)
	}
	path := rewrite(t, fixture(t, "notrailer.db"), &bolt.Options{NoFreelistSync: false}, func(db *bolt.DB) error {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucket([]byte("scratch"))
			if err != nil {
				return err
			}
			for i := range 200 {
				if err := b.Put(fmt.Appendf(nil, "k%04d", i), bytes.Repeat([]byte{'v'}, 500)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		return db.Update(func(tx *bolt.Tx) error { return tx.DeleteBucket([]byte("scratch")) })
	})
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := boltFile{b: b, pageSize: int(binary.NativeEndian.Uint32(b[16+8:]))}
	fl := binary.NativeEndian.Uint64(f.page(0)[16+32:])
	if fl == 1<<64-1 || binary.NativeEndian.Uint16(f.page(fl)[10:]) == 0 {
		t.Fatalf("the rewritten database has no stored freelist with free pages (freelist page %#x)", fl)
	}

	got := checkAgainstEtcdutl(t, path)
	// The records are the same, the pages are not.
	got.Size, got.BoltHash, want.Size, want.BoltHash = 0, 0, 0, 0
	if got != want {
		t.Errorf("File on the rewritten database = %+v, want %+v", got, want)
	}
}
