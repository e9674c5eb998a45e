package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/klauspost/compress/zstd"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The index is a cluster's backups as its agent last listed them, so
// that a reader of many clusters (lifeboat fleet) can read one cluster
// cold in a few requests instead of listing every backup and reading
// every manifest:
//
//	<cluster>/index/<time>.json.zst
//
// <time> is when it was written (UTC, millisecond, fixed width: names
// sort by time). It holds every object listed under snapshots/ (key,
// size, time), every object under changes/ of the capture generations
// with progress markers then (a sealed generation's objects change no
// more once compacted; an open one's names sort by revision, so a
// reader lists only what was added since), and the bytes of the small documents a reader would read:
// every manifest, each backup's newest drill report and every progress
// marker. The
// agent writes one after every job that adds or deletes backups or
// drill reports (Indexer), and prune writes one when it deleted a
// backup of a cluster that has an index; the writer then deletes its
// older indexes but the newest IndexKeep. A reader takes the newest
// index, lists snapshots/ only after the newest key it lists (ids sort
// by time: what was added since), and serves the documents from it;
// each manifest and report still carries and is checked against its
// own signature. What the index itself asserts — which objects exist,
// and their sizes — rests on its signature: with trusted keys a reader
// takes no index that is not signed by one. An index says nothing of
// damage or deletions behind its writer's back after it was written: a
// reader that uses one says so, and the reader's full reads (which list
// every object) are what find them.
//
// The index is not locked by Object Lock: a restore never reads it,
// and its writer must be able to delete it. It holds no secret (the
// documents it carries hold none).

// IndexFormat is the index format this build writes and reads.
const IndexFormat = 1

// IndexKeep is how many of its newest indexes a writer keeps: a reader
// that listed the newest just before a newer one was written can still
// read it.
const IndexKeep = 2

// maxIndexBytes bounds an index's decompressed size (a year of hourly
// backups is about 20 MiB).
const maxIndexBytes = 256 << 20

// maxIndexDocs bounds the bytes of the documents an index carries
// (about 8 000 manifests).
var maxIndexDocs int64 = 16 << 20

// kindIndex is what an index's signature says it is.
const kindIndex = "index"

// indexSuffix ends every index's key.
const indexSuffix = ".json.zst"

// The index's coder, shared: one set of buffers for every index
// written or read (both are safe for concurrent use through EncodeAll
// and DecodeAll).
var (
	indexEncoder = sync.OnceValues(func() (*zstd.Encoder, error) {
		return zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	})
	indexDecoder = sync.OnceValues(func() (*zstd.Decoder, error) {
		return zstd.NewReader(nil, zstd.WithDecoderConcurrency(2), zstd.WithDecoderMaxMemory(maxIndexBytes))
	})
)

// Index is one index document.
type Index struct {
	Format  int    `json:"format"`
	Cluster string `json:"cluster"`
	// Writer is who wrote it (the agent's identity, or the command).
	Writer    string    `json:"writer"`
	WrittenAt time.Time `json:"written_at"`
	// Snapshots are the objects listed under snapshots/, sorted by key.
	Snapshots []IndexObject `json:"snapshots"`
	// Sealed are the capture generations with a sealed progress marker
	// when it was written, Open those with markers but none sealed (the
	// live one), each sorted; Changes every object listed under their
	// changes/ directories then, sorted by key. A sealed generation's
	// objects change no more once compacted; an open one's segment
	// names sort by revision, so a reader lists only what sorts after
	// the newest the index lists (compaction since is not seen).
	Sealed  []string      `json:"sealed,omitempty"`
	Open    []string      `json:"open,omitempty"`
	Changes []IndexObject `json:"changes,omitempty"`
	// Docs are the manifests (the newest, within maxIndexDocs), each
	// backup's newest drill report and the progress markers, with their
	// bytes as stored, sorted by key. A document that could
	// not be read is left out: a reader reads it from the store.
	Docs []IndexDoc `json:"docs"`
}

// IndexObject is one object as listed.
type IndexObject struct {
	Key     string    `json:"key"`
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mtime"`
}

// Info returns o as the store lists it.
func (o IndexObject) Info() uploader.ObjectInfo {
	return uploader.ObjectInfo{Key: o.Key, Size: o.Size, ModTime: o.ModTime}
}

// IndexDoc is one document with the bytes it had as listed.
type IndexDoc struct {
	IndexObject
	Data string `json:"data"`
}

// ErrBadIndex is wrapped when an index does not decode or is
// inconsistent.
var ErrBadIndex = errors.New("bad index")

func (b *Repo) indexDir() string { return path.Join(b.Cluster, "index") + "/" }

// IndexKey returns the key of the index written at t.
func (b *Repo) IndexKey(t time.Time) string {
	return b.indexDir() + t.UTC().Format(drillTimeFormat) + indexSuffix
}

// IsIndexKey reports whether key names an index of the cluster.
func (b *Repo) IsIndexKey(key string) bool {
	name, ok := strings.CutPrefix(key, b.indexDir())
	return ok && !strings.Contains(name, "/") && strings.HasSuffix(name, indexSuffix) && !reportTime(key).IsZero()
}

// NewestIndexKey returns the newest index among objs ("" none).
func (b *Repo) NewestIndexKey(objs []uploader.ObjectInfo) string {
	newest := ""
	for _, o := range objs {
		if b.IsIndexKey(o.Key) && o.Key > newest {
			newest = o.Key
		}
	}
	return newest
}

// Indexer writes a cluster's index, keeping the documents it read for
// the next write (so that each write reads only what is new). Not safe
// for concurrent use.
type Indexer struct {
	Repo   *Repo
	Writer string
	docs   map[string]IndexDoc
}

// Write lists the cluster's backups and drill reports and stores them as
// a new index written at now, then deletes the indexes it supersedes
// (all but the newest IndexKeep). A deletion that fails is returned
// (joined) after the write succeeded: the new index stands either way.
func (x *Indexer) Write(ctx context.Context, now time.Time) (string, error) {
	b := x.Repo
	idx := &Index{Format: IndexFormat, Cluster: b.Cluster, Writer: x.Writer, WrittenAt: now.UTC()}
	var manifests []uploader.ObjectInfo
	err := b.Store.List(ctx, b.dir(), func(o uploader.ObjectInfo) error {
		idx.Snapshots = append(idx.Snapshots, IndexObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
		if strings.HasSuffix(o.Key, ".json") {
			manifests = append(manifests, o)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("index %s: list backups: %w", b.Cluster, err)
	}
	reports, err := b.newestReports(ctx)
	if err != nil {
		return "", fmt.Errorf("index %s: %w", b.Cluster, err)
	}
	want := reports
	// The progress markers (a reader of a generation's window reads
	// them) and the generations' change objects.
	markers, err := b.indexChanges(ctx, idx)
	if err != nil {
		return "", err
	}
	for _, ms := range markers {
		for _, m := range ms {
			want = append(want, m.Object)
		}
	}
	sort.Strings(idx.Sealed)
	sort.Strings(idx.Open)
	sort.Slice(idx.Changes, func(i, j int) bool { return idx.Changes[i].Key < idx.Changes[j].Key })
	// The manifests newest first, as long as the documents carried stay
	// within maxIndexDocs: the writer's memory and the index stay
	// bounded however many backups are kept (readers read the rest).
	sort.Slice(manifests, func(i, j int) bool { return manifests[i].Key > manifests[j].Key })
	want = append(want, manifests...)
	if err := x.carry(ctx, idx, want); err != nil {
		return "", err
	}
	sort.Slice(idx.Snapshots, func(i, j int) bool { return idx.Snapshots[i].Key < idx.Snapshots[j].Key })
	sort.Slice(idx.Docs, func(i, j int) bool { return idx.Docs[i].Key < idx.Docs[j].Key })
	var key string
	for range 5 {
		key = b.IndexKey(idx.WrittenAt)
		if err = b.putIndex(ctx, key, idx); !errors.Is(err, uploader.ErrExists) {
			break
		}
		idx.WrittenAt = idx.WrittenAt.Add(time.Millisecond) // two writes in one millisecond
	}
	if err != nil {
		return "", err
	}
	return key, b.sweepIndexes(ctx, key)
}

// indexChanges lists the progress markers and puts each generation
// with markers in idx (Sealed or Open) with its change objects.
func (b *Repo) indexChanges(ctx context.Context, idx *Index) (map[string][]ProgressInfo, error) {
	markers, _, err := b.ListProgress(ctx)
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", b.Cluster, err)
	}
	for gen, ms := range markers {
		if slices.ContainsFunc(ms, func(m ProgressInfo) bool { return m.Sealed }) {
			idx.Sealed = append(idx.Sealed, gen)
		} else {
			idx.Open = append(idx.Open, gen)
		}
		if err := b.Store.List(ctx, b.changesDir()+gen+"/", func(o uploader.ObjectInfo) error {
			idx.Changes = append(idx.Changes, IndexObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime})
			return nil
		}); err != nil {
			return nil, fmt.Errorf("index %s: list the changes of generation %s: %w", b.Cluster, gen, err)
		}
	}
	return markers, nil
}

// carry puts the documents of want in idx, in order, until they would
// exceed maxIndexDocs: from the last write's when listed as then, else
// read. A document deleted, replaced or not text since the listing is
// left out (readers read it).
func (x *Indexer) carry(ctx context.Context, idx *Index, want []uploader.ObjectInfo) error {
	b := x.Repo
	docs := make(map[string]IndexDoc, len(want))
	var carried int64
	for _, o := range want {
		if carried += o.Size; carried > maxIndexDocs {
			break
		}
		d, ok := x.docs[o.Key]
		if !ok || d.Size != o.Size || !d.ModTime.Equal(o.ModTime) {
			data, err := readSmall(ctx, b.Store, o.Key)
			if errors.Is(err, uploader.ErrNotFound) {
				continue // deleted since the listing
			}
			if err != nil {
				return fmt.Errorf("index %s: %w", b.Cluster, err)
			}
			if int64(len(data)) != o.Size || !utf8.Valid(data) {
				continue // replaced since the listing, or not text: readers read it
			}
			d = IndexDoc{IndexObject: IndexObject{Key: o.Key, Size: o.Size, ModTime: o.ModTime}, Data: string(data)}
		}
		docs[o.Key] = d
		idx.Docs = append(idx.Docs, d)
	}
	x.docs = docs
	return nil
}

// readSmall reads a document of at most 1 MiB.
func readSmall(ctx context.Context, st uploader.Store, key string) ([]byte, error) {
	rc, err := st.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return data, nil
}

// putIndex signs, compresses and stores idx at key.
func (b *Repo) putIndex(ctx context.Context, key string, idx *Index) error {
	data, err := json.Marshal(idx)
	if err != nil {
		return err
	}
	if data, err = b.sign(kindIndex, key, append(data, '\n')); err != nil {
		return err
	}
	enc, err := indexEncoder()
	if err != nil {
		return err
	}
	// EncodeAll records the size in the frame: a reader allocates it once.
	z := enc.EncodeAll(data, nil)
	// No Object Lock: nothing restores from it and its writer deletes it.
	if _, err := b.Store.Put(ctx, key, bytes.NewReader(z), uploader.PutOptions{ContentType: "application/zstd"}); err != nil {
		return fmt.Errorf("write index %s: %w", key, err)
	}
	return nil
}

// sweepIndexes deletes the indexes older than the newest IndexKeep
// (keep, just written, among them).
func (b *Repo) sweepIndexes(ctx context.Context, keep string) error {
	var keys []string
	err := b.Store.List(ctx, b.indexDir(), func(o uploader.ObjectInfo) error {
		if b.IsIndexKey(o.Key) && o.Key <= keep {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("list indexes: %w", err)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(keys)))
	var errs []error
	for i, k := range keys {
		if i < IndexKeep {
			continue
		}
		if err := b.Store.Delete(ctx, k); err != nil {
			errs = append(errs, fmt.Errorf("delete superseded index %s: %w", k, err))
		}
	}
	return errors.Join(errs...)
}

// HasIndex reports whether the cluster has an index.
func (b *Repo) HasIndex(ctx context.Context) (bool, error) {
	found := false
	err := b.Store.List(ctx, b.indexDir(), func(o uploader.ObjectInfo) error {
		if b.IsIndexKey(o.Key) {
			found = true
		}
		return nil
	})
	return found, err
}

// newestReports lists the drills area and returns each backup's newest
// report, as LastDrills chooses them.
func (b *Repo) newestReports(ctx context.Context) ([]uploader.ObjectInfo, error) {
	newest, err := b.listNewestReports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]uploader.ObjectInfo, 0, len(newest))
	for _, o := range newest {
		out = append(out, o)
	}
	return out, nil
}

// ReadIndex reads, checks and decodes the index at key: an index that
// is not signed by a trusted key is an error wrapping ErrUntrusted, one
// that does not decode or is of another cluster wraps ErrBadIndex.
func (b *Repo) ReadIndex(ctx context.Context, key string) (*Index, error) {
	rc, err := b.Store.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", key, err)
	}
	defer rc.Close()
	z, err := io.ReadAll(io.LimitReader(rc, maxIndexBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read index %s: %w", key, err)
	}
	dec, err := indexDecoder()
	if err != nil {
		return nil, err
	}
	data, err := dec.DecodeAll(z, nil)
	if err != nil || len(z) > maxIndexBytes {
		return nil, fmt.Errorf("index %s: %w: %v (at most %d MiB)", key, ErrBadIndex, err, maxIndexBytes>>20)
	}
	if _, err := b.check(kindIndex, key, data); err != nil {
		return nil, err
	}
	var idx Index
	if err := json.Unmarshal(data, &idx); err != nil {
		return nil, fmt.Errorf("index %s: %w: %v", key, ErrBadIndex, err)
	}
	switch {
	case idx.Format != IndexFormat:
		return nil, fmt.Errorf("index %s: %w: format %d, this build reads format %d", key, ErrBadIndex, idx.Format, IndexFormat)
	case idx.Cluster != b.Cluster:
		return nil, fmt.Errorf("index %s: %w: it is of cluster %q", key, ErrBadIndex, idx.Cluster)
	}
	for _, o := range idx.Snapshots {
		if !strings.HasPrefix(o.Key, b.dir()) {
			return nil, fmt.Errorf("index %s: %w: it lists %s, outside %s", key, ErrBadIndex, o.Key, b.dir())
		}
	}
	sealed := map[string]bool{}
	for _, g := range append(slices.Clone(idx.Sealed), idx.Open...) {
		sealed[g] = true
	}
	for _, o := range idx.Changes {
		gen, _, _ := strings.Cut(strings.TrimPrefix(o.Key, b.changesDir()), "/")
		if !strings.HasPrefix(o.Key, b.changesDir()) || !sealed[gen] {
			return nil, fmt.Errorf("index %s: %w: it lists %s, not in a generation it names", key, ErrBadIndex, o.Key)
		}
	}
	for _, d := range idx.Docs {
		if (!strings.HasPrefix(d.Key, b.dir()) && !strings.HasPrefix(d.Key, b.drillDir()) && !strings.HasPrefix(d.Key, b.progressDir())) || int64(len(d.Data)) != d.Size {
			return nil, fmt.Errorf("index %s: %w: document %s is outside its areas or not of its size", key, ErrBadIndex, d.Key)
		}
	}
	return &idx, nil
}
