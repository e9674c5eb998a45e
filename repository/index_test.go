package repository

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// countingStore counts the Gets of its store.
type countingStore struct {
	uploader.Store
	gets atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

// TestIndexWriteRead: an index lists every object under snapshots/ and
// carries every manifest and each backup's newest drill report with
// their bytes as stored; the next write reads only what is new; a
// writer keeps its newest IndexKeep indexes.
func TestIndexWriteRead(t *testing.T) {
	ctx := t.Context()
	base := newDirRepo(t)
	cs := &countingStore{Store: base.Store}
	b := New(cs, "prod")
	b.Cluster = "prod"
	m1 := putBackupOf(t, b, "20261130T113800Z-r42", "c1")
	m2 := putBackupOf(t, b, "20261130T123800Z-r50", "c1")
	old, newer := testReport(m1.ID, time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), false), testReport(m1.ID, time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC), true)
	for _, r := range []*DrillReport{old, newer} {
		r.Cluster = "prod"
		if err := b.PutDrillReport(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	x := &Indexer{Repo: b, Writer: "agent-1"}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	cs.gets.Store(0)
	key, err := x.Write(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.gets.Load(); got != 3 {
		t.Errorf("first write read %d documents, want 3 (two manifests, one report)", got)
	}
	idx, err := b.ReadIndex(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	if err := b.Store.List(ctx, "prod/snapshots/", func(o uploader.ObjectInfo) error {
		listed = append(listed, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	var inIndex []string
	for _, o := range idx.Snapshots {
		inIndex = append(inIndex, o.Key)
	}
	if strings.Join(listed, " ") != strings.Join(inIndex, " ") {
		t.Errorf("index lists %v, the store %v", inIndex, listed)
	}
	want := map[string]bool{b.ManifestKey(m1.ID): true, b.ManifestKey(m2.ID): true, b.DrillReportKey(m1.ID, newer.StartedAt): true}
	if len(idx.Docs) != len(want) {
		t.Errorf("index carries %d documents, want %d", len(idx.Docs), len(want))
	}
	for _, d := range idx.Docs {
		if !want[d.Key] {
			t.Errorf("index carries %s", d.Key)
			continue
		}
		data, err := readSmall(ctx, base.Store, d.Key)
		if err != nil || !bytes.Equal(data, []byte(d.Data)) {
			t.Errorf("document %s: carried bytes differ from the stored (%v)", d.Key, err)
		}
	}
	if idx.Writer != "agent-1" || !idx.WrittenAt.Equal(t0) || idx.Cluster != "prod" {
		t.Errorf("index header %+v", idx)
	}

	m3 := putBackupOf(t, b, "20261130T133800Z-r60", "c1")
	marker, err := b.PutProgress(ctx, &Progress{Format: ProgressFormat, Generation: m3.ID, ClusterID: "c1", SnapshotID: m3.ID, SnapshotRevision: m3.Revision,
		Through: m3.Revision, At: t0, Token: 1})
	if err != nil {
		t.Fatal(err)
	}
	cs.gets.Store(0)
	for i := range 3 {
		if key, err = x.Write(ctx, t0.Add(time.Duration(i+1)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if got := cs.gets.Load(); got != 2 {
		t.Errorf("three more writes read %d documents, want 2 (the new manifest and the progress marker)", got)
	}
	idx, err = b.ReadIndex(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	carried := map[string]bool{}
	for _, d := range idx.Docs {
		carried[d.Key] = true
	}
	if len(idx.Docs) != 5 || !carried[marker] || !carried[b.ManifestKey(m3.ID)] {
		t.Errorf("index carries %v; want 5 documents, the new manifest and the marker %s among them", carried, marker)
	}
	var keys []string
	if err := b.Store.List(ctx, b.indexDir(), func(o uploader.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(keys) != IndexKeep || keys[len(keys)-1] != key {
		t.Errorf("indexes kept %v, want the newest %d ending at %s", keys, IndexKeep, key)
	}
	if got := b.NewestIndexKey([]uploader.ObjectInfo{{Key: keys[0]}, {Key: key}, {Key: "prod/index/junk"}}); got != key {
		t.Errorf("NewestIndexKey = %s, want %s", got, key)
	}
	if ok, err := b.HasIndex(ctx); !ok || err != nil {
		t.Errorf("HasIndex = %v, %v", ok, err)
	}
}

// TestIndexTrust: with trusted keys an index must be signed by one;
// damage and another cluster's index are ErrBadIndex, never a panic.
func TestIndexTrust(t *testing.T) {
	ctx := t.Context()
	b := newDirRepo(t)
	putBackupOf(t, b, "20261130T113800Z-r42", "c1")
	k, other := signingKey(t), signingKey(t)
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	signed, err := (&Indexer{Repo: writer(b, k), Writer: "a"}).Write(ctx, t0)
	if err != nil {
		t.Fatal(err)
	}
	unsigned, err := (&Indexer{Repo: writer(b, nil), Writer: "a"}).Write(ctx, t0.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reader(b, false, k).ReadIndex(ctx, signed); err != nil {
		t.Errorf("signed index, its key trusted: %v", err)
	}
	if _, err := reader(b, false, other).ReadIndex(ctx, signed); !errors.Is(err, ErrUntrusted) {
		t.Errorf("signed by an untrusted key: %v, want ErrUntrusted", err)
	}
	if _, err := reader(b, false, k).ReadIndex(ctx, unsigned); !errors.Is(err, ErrUntrusted) {
		t.Errorf("unsigned, signatures required: %v, want ErrUntrusted", err)
	}
	if _, err := reader(b, true, k).ReadIndex(ctx, unsigned); err != nil {
		t.Errorf("unsigned, allow_unsigned: %v", err)
	}
	if _, err := New(b.Store, "staging").ReadIndex(ctx, unsigned); err == nil {
		t.Error("an index read as another cluster's: no error")
	}
	bad := b.IndexKey(t0.Add(2 * time.Minute))
	for _, data := range [][]byte{[]byte("not zstd"), nil} {
		if err := b.Store.Delete(ctx, bad); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Store.Put(ctx, bad, bytes.NewReader(data), uploader.PutOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.ReadIndex(ctx, bad); !errors.Is(err, ErrBadIndex) {
			t.Errorf("index of %q: %v, want ErrBadIndex", data, err)
		}
	}
}

// TestIndexBounded: however many backups a cluster keeps, an index
// carries documents up to maxIndexDocs, the newest manifests first: the
// writer's memory stays bounded, and readers read the older ones.
func TestIndexBounded(t *testing.T) {
	ctx := t.Context()
	b := newDirRepo(t)
	var ids []string
	for i := range 6 {
		ids = append(ids, putBackupOf(t, b, fmt.Sprintf("20261130T1%d3800Z-r%d", i, 40+i), "c1").ID)
	}
	var one int64
	if err := b.Store.List(ctx, b.dir(), func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") {
			one = max(one, o.Size)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	defer func(v int64) { maxIndexDocs = v }(maxIndexDocs)
	maxIndexDocs = 3*one + one/2 // three manifests fit, not four
	key, err := (&Indexer{Repo: b, Writer: "a"}).Write(ctx, time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	idx, err := b.ReadIndex(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var carried []string
	for _, d := range idx.Docs {
		carried = append(carried, d.Key)
	}
	want := []string{b.ManifestKey(ids[3]), b.ManifestKey(ids[4]), b.ManifestKey(ids[5])}
	if strings.Join(carried, " ") != strings.Join(want, " ") || len(idx.Snapshots) != 12 {
		t.Errorf("carried %v of %d listed objects; want the newest three manifests %v of 12", carried, len(idx.Snapshots), want)
	}
}
