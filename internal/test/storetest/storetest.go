// Package storetest is the contract test suite that every uploader.Store
// implementation passes: the local directory and S3 run the same checks.
//
// It checks behaviour through the Store interface only, plus two optional
// extras when the store has them: a store with Root() string (a directory)
// must hold no files beyond its listed objects after failed Puts, and a
// store with ListIncompleteUploads (S3) must have no multipart upload left
// behind. It is meant to be imported only by tests.
package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Sizes used by the suite. LargeSize spans several parts of an S3 store
// configured with 5 MiB parts; FailSize is past the first part.
const (
	LargeSize = 40 << 20
	FailSize  = 12 << 20
	ManyKeys  = 1100 // more than one 1000-key listing page
)

// Run runs the contract suite. newStore must return a fresh, empty store
// for every call (a new directory, a new bucket or prefix).
func Run(t *testing.T, newStore func(t *testing.T) uploader.Store) {
	t.Run("PutGetStat", func(t *testing.T) { testPutGetStat(t, newStore(t)) })
	t.Run("NoOverwrite", func(t *testing.T) { testNoOverwrite(t, newStore(t)) })
	t.Run("ConcurrentCreate", func(t *testing.T) { testConcurrentCreate(t, newStore(t)) })
	t.Run("MissingKey", func(t *testing.T) { testMissingKey(t, newStore(t)) })
	t.Run("Delete", func(t *testing.T) { testDelete(t, newStore(t)) })
	t.Run("List", func(t *testing.T) { testList(t, newStore(t)) })
	t.Run("ListStopsOnError", func(t *testing.T) { testListStops(t, newStore(t)) })
	t.Run("ListManyKeys", func(t *testing.T) { testListMany(t, newStore(t)) })
	t.Run("ReaderFails", func(t *testing.T) { testReaderFails(t, newStore(t)) })
	t.Run("CanceledContext", func(t *testing.T) { testCanceled(t, newStore(t)) })
	t.Run("ConcurrentPuts", func(t *testing.T) { testConcurrent(t, newStore(t)) })
	t.Run("LargeObject", func(t *testing.T) { testLarge(t, newStore(t)) })
	t.Run("ReadHead", func(t *testing.T) { testReadHead(t, newStore(t)) })
}

// ErrInjected is the error the suite's failing readers return.
var ErrInjected = errors.New("storetest: injected reader failure")

// Data returns n deterministic pseudo-random bytes for seed.
func Data(seed uint64, n int) []byte {
	b := make([]byte, n)
	_, _ = io.ReadFull(Stream(seed, int64(n)), b)
	return b
}

// Stream returns a reader of n deterministic pseudo-random bytes for seed,
// the same bytes as Data, without holding them in memory.
func Stream(seed uint64, n int64) io.Reader {
	var key [32]byte
	key[0] = byte(seed)
	key[1] = byte(seed >> 8)
	key[2] = byte(seed >> 16)
	key[3] = byte(seed >> 24)
	return &plainReader{r: io.LimitReader(rand.NewChaCha8(key), n)}
}

// plainReader hides io.WriterTo, io.Seeker and the like, so stores see a
// plain stream of unknown length, as from the encoding pipeline.
type plainReader struct{ r io.Reader }

func (f *plainReader) Read(p []byte) (int, error) { return f.r.Read(p) }

// Failing returns a reader of n bytes of Stream(seed) that then fails with
// ErrInjected instead of io.EOF.
func Failing(seed uint64, n int64) io.Reader {
	return io.MultiReader(Stream(seed, n), errReader{ErrInjected})
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// Put puts content at key and fails the test on error.
func Put(t *testing.T, s uploader.Store, key string, content []byte) uploader.ObjectInfo {
	t.Helper()
	info, err := s.Put(t.Context(), key, &plainReader{bytes.NewReader(content)}, uploader.PutOptions{})
	if err != nil {
		t.Fatalf("Put(%q): %v", key, err)
	}
	return info
}

// Read returns the content at key and fails the test on error.
func Read(t *testing.T, s uploader.Store, key string) []byte {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%q): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	return b
}

// Keys lists the keys under prefix.
func Keys(t *testing.T, s uploader.Store, prefix string) []string {
	t.Helper()
	var keys []string
	err := s.List(t.Context(), prefix, func(o uploader.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	return keys
}

// AssertMissing checks that key is not visible: Stat and Get fail with
// ErrNotFound and List does not show it.
func AssertMissing(t *testing.T, s uploader.Store, key string) {
	t.Helper()
	if info, err := s.Stat(t.Context(), key); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("Stat(%q) = %+v, %v; want ErrNotFound", key, info, err)
	}
	if rc, err := s.Get(t.Context(), key); !errors.Is(err, uploader.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Get(%q) error = %v; want ErrNotFound", key, err)
	}
	if keys := Keys(t, s, key); slices.Contains(keys, key) {
		t.Errorf("List(%q) = %q; want no %q", key, keys, key)
	}
}

// incompleteLister is implemented by stores with multipart uploads (S3).
type incompleteLister interface {
	ListIncompleteUploads(ctx context.Context, olderThan time.Time) ([]uploader.IncompleteUpload, error)
}

// rooted is implemented by stores in a local directory.
type rooted interface{ Root() string }

// AssertNoLeftovers checks that failed Puts left nothing behind: no
// multipart upload (stores with ListIncompleteUploads) and no file beyond
// the listed objects (stores with Root).
func AssertNoLeftovers(t *testing.T, s uploader.Store) {
	t.Helper()
	if l, ok := s.(incompleteLister); ok {
		ups, err := l.ListIncompleteUploads(t.Context(), time.Now().Add(24*time.Hour))
		if err != nil {
			t.Fatalf("ListIncompleteUploads: %v", err)
		}
		if len(ups) != 0 {
			t.Errorf("incomplete uploads left behind: %+v", ups)
		}
	}
	if r, ok := s.(rooted); ok {
		listed := Keys(t, s, "")
		var files []string
		err := filepath.WalkDir(r.Root(), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return err
			}
			rel, err := filepath.Rel(r.Root(), p)
			files = append(files, filepath.ToSlash(rel))
			return err
		})
		if err != nil {
			t.Fatalf("walk %s: %v", r.Root(), err)
		}
		slices.Sort(files)
		if diff := cmp.Diff(listed, files); diff != "" {
			t.Errorf("files in %s differ from listed objects (-listed +files):\n%s", r.Root(), diff)
		}
	}
}

func testPutGetStat(t *testing.T, s uploader.Store) {
	for _, tc := range []struct {
		name string
		key  string
		size int
	}{
		{"empty", "empty.bin", 0},
		{"one byte", "one", 1},
		{"small", "dir/small.json", 1000},
		{"nested", "a/b/c/d/obj.db.zst", 64 << 10},
		{"megabyte", "cluster/snapshots/20261130T113800Z-r250001.db.zst", 1<<20 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := Data(uint64(tc.size), tc.size)
			info := Put(t, s, tc.key, content)
			if info.Key != tc.key || info.Size != int64(tc.size) || info.SHA256 != sum(content) {
				t.Errorf("Put info = {Key:%q Size:%d SHA256:%s}; want {%q %d %s}",
					info.Key, info.Size, info.SHA256, tc.key, tc.size, sum(content))
			}
			if got := Read(t, s, tc.key); !bytes.Equal(got, content) {
				t.Errorf("Get(%q) = %d bytes (sha256 %s); want %d bytes (sha256 %s)", tc.key, len(got), sum(got), len(content), sum(content))
			}
			st, err := s.Stat(t.Context(), tc.key)
			if err != nil {
				t.Fatalf("Stat(%q): %v", tc.key, err)
			}
			if st.Key != tc.key || st.Size != int64(tc.size) || st.ModTime.IsZero() {
				t.Errorf("Stat(%q) = %+v; want Key %q, Size %d, a ModTime", tc.key, st, tc.key, tc.size)
			}
			if st.Locked(time.Now()) {
				t.Errorf("Stat(%q) = %+v: locked without lock options", tc.key, st)
			}
		})
	}
	if s.String() == "" {
		t.Error("String() is empty")
	}
}

// testNoOverwrite: a Put of a key that exists fails with ErrExists, names
// the object, leaves the stored object as it was and nothing behind, whether
// the new content is one small write or a multipart upload.
func testNoOverwrite(t *testing.T, s uploader.Store) {
	const key = "snapshots/x.json"
	first := []byte("first version, longer than the second")
	Put(t, s, key, first)
	for _, tc := range []struct {
		name string
		size int
	}{
		{"small", 6},
		{"past one part", FailSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Put(t.Context(), key, &plainReader{bytes.NewReader(Data(5, tc.size))}, uploader.PutOptions{})
			if !errors.Is(err, uploader.ErrExists) {
				t.Fatalf("second Put(%q) error = %v; want ErrExists", key, err)
			}
			if !strings.Contains(err.Error(), "x.json") {
				t.Errorf("second Put error %q does not name the object", err)
			}
			if got := Read(t, s, key); !bytes.Equal(got, first) {
				t.Errorf("after the refused Put Get = %q; want the first version %q", got, first)
			}
			if keys := Keys(t, s, ""); !slices.Equal(keys, []string{key}) {
				t.Errorf("List = %q; want [%q]", keys, key)
			}
			AssertNoLeftovers(t, s)
		})
	}
	// Once deleted, the key can be written again.
	if err := s.Delete(t.Context(), key); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	Put(t, s, key, []byte("again"))
	if got := string(Read(t, s, key)); got != "again" {
		t.Errorf("after delete and Put Get = %q; want %q", got, "again")
	}
}

// testConcurrentCreate: writers of one key at the same time (two agents
// taking the same backup id): exactly one succeeds, the others fail with
// ErrExists, the stored object is the winner's, whole, and nothing is left
// behind.
func testConcurrentCreate(t *testing.T, s uploader.Store) {
	for _, tc := range []struct {
		name  string
		sizes []int
	}{
		{"two small", []int{300 << 10, 300 << 10}},
		{"small and past one part", []int{1000, FailSize}},
		{"four past one part", []int{FailSize, FailSize + 1, FailSize + 2, FailSize + 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "same/" + strings.ReplaceAll(tc.name, " ", "-")
			versions := make([][]byte, len(tc.sizes))
			errs := make([]error, len(tc.sizes))
			infos := make([]uploader.ObjectInfo, len(tc.sizes))
			start := make(chan struct{})
			var wg sync.WaitGroup
			for i, n := range tc.sizes {
				versions[i] = Data(uint64(300+i), n)
				wg.Go(func() {
					<-start
					infos[i], errs[i] = s.Put(t.Context(), key, &plainReader{bytes.NewReader(versions[i])}, uploader.PutOptions{})
				})
			}
			close(start)
			wg.Wait()
			winner := -1
			for i, err := range errs {
				switch {
				case err == nil && winner >= 0:
					t.Errorf("writers %d and %d both succeeded", winner, i)
				case err == nil:
					winner = i
				case !errors.Is(err, uploader.ErrExists):
					t.Errorf("writer %d: error %v; want ErrExists", i, err)
				}
			}
			if winner < 0 {
				t.Fatalf("no writer succeeded: %v", errs)
			}
			got := Read(t, s, key)
			if !bytes.Equal(got, versions[winner]) {
				t.Errorf("Get = %d bytes (sha256 %s); want the winner's %d bytes (sha256 %s)", len(got), sum(got), len(versions[winner]), sum(versions[winner]))
			}
			if infos[winner].SHA256 != sum(versions[winner]) {
				t.Errorf("winner's Put info sha256 %s; want %s", infos[winner].SHA256, sum(versions[winner]))
			}
			if keys := Keys(t, s, key); !slices.Equal(keys, []string{key}) {
				t.Errorf("List(%q) = %q; want [%q]", key, keys, key)
			}
			AssertNoLeftovers(t, s)
		})
	}
}

func testMissingKey(t *testing.T, s uploader.Store) {
	Put(t, s, "present", []byte("x"))
	const key = "snapshots/missing.db"
	_, err := s.Stat(t.Context(), key)
	if !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("Stat(missing) error = %v; want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), "missing.db") {
		t.Errorf("Stat(missing) error %q does not name the object", err)
	}
	rc, err := s.Get(t.Context(), key)
	if !errors.Is(err, uploader.ErrNotFound) {
		if rc != nil {
			rc.Close()
		}
		t.Errorf("Get(missing) error = %v; want ErrNotFound", err)
	} else if !strings.Contains(err.Error(), "missing.db") {
		t.Errorf("Get(missing) error %q does not name the object", err)
	}
}

// testReadHead: uploader.ReadHead returns an object's first bytes (all
// of a shorter one) with a ranged read where the store has one, and
// ErrNotFound for a missing key.
func testReadHead(t *testing.T, s uploader.Store) {
	data := Data(7, 100_000)
	Put(t, s, "head/obj", data)
	Put(t, s, "head/short", data[:10])
	for _, tc := range []struct {
		key  string
		n    int64
		want []byte
	}{{"head/obj", 4096, data[:4096]}, {"head/obj", 1, data[:1]}, {"head/short", 4096, data[:10]}} {
		got, err := uploader.ReadHead(t.Context(), s, tc.key, tc.n)
		if err != nil || !bytes.Equal(got, tc.want) {
			t.Errorf("ReadHead(%s, %d) = %d bytes, %v; want the first %d bytes", tc.key, tc.n, len(got), err, len(tc.want))
		}
	}
	if _, err := uploader.ReadHead(t.Context(), s, "head/missing", 10); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("ReadHead(missing) error = %v; want ErrNotFound", err)
	}
	if _, ok := s.(uploader.RangeReader); !ok {
		t.Logf("%T is not a RangeReader: ReadHead reads the start of a Get", s)
	}
}

func testDelete(t *testing.T, s uploader.Store) {
	Put(t, s, "keep", []byte("keep"))
	Put(t, s, "dir/gone", []byte("gone"))
	if err := s.Delete(t.Context(), "dir/gone"); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	AssertMissing(t, s, "dir/gone")
	for _, key := range []string{"dir/gone", "never/existed"} {
		if err := s.Delete(t.Context(), key); err != nil {
			t.Errorf("Delete(%q) of a missing key = %v; want nil", key, err)
		}
	}
	if got := string(Read(t, s, "keep")); got != "keep" {
		t.Errorf("other object changed: %q", got)
	}
	if keys := Keys(t, s, ""); !slices.Equal(keys, []string{"keep"}) {
		t.Errorf("List = %q; want [keep]", keys)
	}
}

func testList(t *testing.T, s uploader.Store) {
	all := []string{ // sorted; '-' < '.' < '/' < letters
		"a-b",
		"a.b",
		"a/b",
		"a/c/d",
		"ab",
		"b/x",
		"c/drills/20261130T113800Z-r250001/20261130T120000Z.json",
		"c/snapshots/20261130T113800Z-r250001.db.zst",
		"c/snapshots/20261130T113800Z-r250001.json",
		"c/snapshots/20261201T000000Z-r300000.json",
	}
	shuffled := slices.Clone(all)
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	for _, k := range shuffled {
		Put(t, s, k, []byte(k))
	}
	for _, tc := range []struct {
		prefix string
		want   []string
	}{
		{"", all},
		{"a", all[:5]},
		{"a/", []string{"a/b", "a/c/d"}},
		{"a/c", []string{"a/c/d"}},
		{"a/c/d", []string{"a/c/d"}},
		{"c/snapshots/", all[7:]},
		{"c/snapshots/20261130", all[7:9]},
		{"zzz", nil},
		{"nope/", nil},
	} {
		t.Run(fmt.Sprintf("prefix %q", tc.prefix), func(t *testing.T) {
			var got []string
			err := s.List(t.Context(), tc.prefix, func(o uploader.ObjectInfo) error {
				got = append(got, o.Key)
				if o.Size != int64(len(o.Key)) {
					t.Errorf("List: %q has Size %d; want %d", o.Key, o.Size, len(o.Key))
				}
				if o.ModTime.IsZero() {
					t.Errorf("List: %q has no ModTime", o.Key)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("List(%q): %v", tc.prefix, err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("List(%q) (-want +got):\n%s", tc.prefix, diff)
			}
		})
	}
}

func testListStops(t *testing.T, s uploader.Store) {
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		Put(t, s, k, []byte(k))
	}
	stop := errors.New("stop here")
	calls := 0
	err := s.List(t.Context(), "", func(uploader.ObjectInfo) error {
		calls++
		if calls == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || calls != 2 {
		t.Errorf("List with fn failing on the 2nd call: err %v after %d calls; want %v after 2", err, calls, stop)
	}
}

func testListMany(t *testing.T, s uploader.Store) {
	if testing.Short() {
		t.Skip("-short: skipping the listing of many keys")
	}
	want := make([]string, ManyKeys)
	for i := range want {
		want[i] = fmt.Sprintf("many/%05d", i)
	}
	work := make(chan string)
	var wg sync.WaitGroup
	errs := make(chan error, ManyKeys)
	for range 8 {
		wg.Go(func() {
			for k := range work {
				if _, err := s.Put(t.Context(), k, strings.NewReader(k), uploader.PutOptions{}); err != nil {
					errs <- fmt.Errorf("Put(%q): %w", k, err)
				}
			}
		})
	}
	for _, k := range want {
		work <- k
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	Put(t, s, "other", []byte("x"))
	if diff := cmp.Diff(want, Keys(t, s, "many/")); diff != "" {
		t.Errorf("List(many/) (-want +got):\n%s", diff)
	}
	if n := len(Keys(t, s, "")); n != ManyKeys+1 {
		t.Errorf("List(\"\") = %d keys; want %d", n, ManyKeys+1)
	}
}

func testReaderFails(t *testing.T, s uploader.Store) {
	for _, tc := range []struct {
		name string
		size int64
	}{
		{"at once", 0},
		{"small", 1000},
		{"after several parts", FailSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			prev := []byte("previous good object at " + tc.name)
			key := "fail/" + strings.ReplaceAll(tc.name, " ", "-")
			Put(t, s, key, prev)
			newKey := key + ".new"

			// Over an existing object the Put fails either way: the
			// reader's error, or ErrExists (a store may refuse before
			// reading).
			info, err := s.Put(t.Context(), key, Failing(7, tc.size), uploader.PutOptions{})
			if !errors.Is(err, ErrInjected) && !errors.Is(err, uploader.ErrExists) {
				t.Fatalf("Put over an object with a failing reader = %+v, %v; want an error wrapping %v or ErrExists", info, err, ErrInjected)
			}
			if got := Read(t, s, key); !bytes.Equal(got, prev) {
				t.Errorf("previous object changed to %d bytes %.40q", len(got), got)
			}

			info, err = s.Put(t.Context(), newKey, Failing(7, tc.size), uploader.PutOptions{})
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("Put with a failing reader = %+v, %v; want an error wrapping %v", info, err, ErrInjected)
			}
			AssertMissing(t, s, newKey)
			if keys := Keys(t, s, "fail/"); slices.Contains(keys, newKey) {
				t.Errorf("List shows the failed object: %q", keys)
			}
			AssertNoLeftovers(t, s)
		})
	}
}

// cancelingReader cancels its context after n bytes and goes on reading, as
// a job whose deadline passes mid-upload.
type cancelingReader struct {
	r      io.Reader
	n      int64
	cancel context.CancelFunc
}

func (c *cancelingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n -= int64(n)
	if c.n <= 0 {
		c.cancel()
	}
	return n, err
}

func testCanceled(t *testing.T, s uploader.Store) {
	t.Run("before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		info, err := s.Put(ctx, "canceled/before", Stream(1, 1000), uploader.PutOptions{})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Put with a canceled context = %+v, %v; want context.Canceled", info, err)
		}
		AssertMissing(t, s, "canceled/before")
	})
	for _, tc := range []struct {
		name        string
		size, after int64
	}{
		{"mid small", 1 << 20, 1000},
		{"mid large", FailSize + 1<<20, FailSize},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "canceled/" + strings.ReplaceAll(tc.name, " ", "-")
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			r := &cancelingReader{r: Stream(2, tc.size), n: tc.after, cancel: cancel}
			info, err := s.Put(ctx, key, r, uploader.PutOptions{})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Put canceled after %d bytes = %+v, %v; want context.Canceled", tc.after, info, err)
			}
			AssertMissing(t, s, key)
			AssertNoLeftovers(t, s)
		})
	}
}

func testConcurrent(t *testing.T, s uploader.Store) {
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			key := fmt.Sprintf("conc/distinct-%d", i)
			content := Data(uint64(100+i), 256<<10)
			if _, err := s.Put(t.Context(), key, bytes.NewReader(content), uploader.PutOptions{}); err != nil {
				errs <- fmt.Errorf("Put(%q): %w", key, err)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range n {
		key := fmt.Sprintf("conc/distinct-%d", i)
		if got := Read(t, s, key); !bytes.Equal(got, Data(uint64(100+i), 256<<10)) {
			t.Errorf("Get(%q): content differs from what was put", key)
		}
	}
	if keys := Keys(t, s, "conc/"); len(keys) != n {
		t.Errorf("List(conc/) = %q; want %d keys", keys, n)
	}
	AssertNoLeftovers(t, s)
}

func testLarge(t *testing.T, s uploader.Store) {
	const key = "large/object.db.zst.age"
	want := sha256.New()
	if _, err := io.Copy(want, Stream(3, LargeSize)); err != nil {
		t.Fatal(err)
	}
	wantSum := hex.EncodeToString(want.Sum(nil))

	info, err := s.Put(t.Context(), key, Stream(3, LargeSize), uploader.PutOptions{})
	if err != nil {
		t.Fatalf("Put(%d bytes): %v", LargeSize, err)
	}
	if info.Size != LargeSize || info.SHA256 != wantSum {
		t.Errorf("Put info Size %d SHA256 %s; want %d %s", info.Size, info.SHA256, LargeSize, wantSum)
	}
	st, err := s.Stat(t.Context(), key)
	if err != nil || st.Size != LargeSize {
		t.Errorf("Stat = %+v, %v; want Size %d", st, err, LargeSize)
	}
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got := sha256.New()
	n, err := io.Copy(got, rc)
	if err != nil {
		t.Fatalf("read after %d bytes: %v", n, err)
	}
	if n != LargeSize || hex.EncodeToString(got.Sum(nil)) != wantSum {
		t.Errorf("Get = %d bytes sha256 %x; want %d bytes %s", n, got.Sum(nil), LargeSize, wantSum)
	}
	AssertNoLeftovers(t, s)
}

// ReadObject returns the stored bytes of key in st, failing t when they
// cannot be read.
func ReadObject(t testing.TB, st uploader.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
