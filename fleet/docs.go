package fleet

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The fleet's document cache. Every small object the fleet reads (a
// manifest, a drill report, an agent status document, a progress
// marker, a kit manifest) is kept as the bytes the store returned, keyed
// by what the listing proves unchanged: its key, size and modification
// time. A listing that shows the key with another size or time (the
// object was deleted and written again) reads it anew, a key the
// listing no longer shows is dropped, and an object is read from the
// cache only when the listing of this very refresh shows it: the cache
// never answers for an object that does not exist now. Kept as bytes,
// not as parsed documents, so every parse and every signature check
// runs again with the trust configured now: a cache written under other
// trusted keys cannot carry their verdicts.
//
// With a directory (fleet.cache_dir) the cache survives restarts: one
// file, written to a temporary name, fsynced and renamed, 0600 in a
// 0700 directory. A file that is missing, of another format version,
// truncated or corrupt (its sha256 trailer does not match) is ignored
// and rebuilt from the stores: it costs a cold read, never a wrong
// answer.

// maxDoc bounds the objects cached: the fleet's documents are a few
// KiB; change segments and data objects are never read by the fleet.
const maxDoc = 64 << 10

// cacheMagic starts a cache file; its number is the format version.
const cacheMagic = "lifeboat fleet cache 1\n"

// CacheFile is the cache file's name in fleet.cache_dir.
const CacheFile = "fleet-cache.v1"

// doc is one cached object's bytes with what the listing showed.
type doc struct {
	Size    int64
	ModTime time.Time
	Data    []byte
}

// docCache is the document cache of one store, by key. Safe for
// concurrent use.
type docCache struct {
	mu    sync.Mutex
	docs  map[string]doc
	dirty bool
}

func newDocCache() *docCache { return &docCache{docs: map[string]doc{}} }

// get returns the bytes cached for the listed object o.
func (c *docCache) get(o uploader.ObjectInfo) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.docs[o.Key]
	if !ok || d.Size != o.Size || !d.ModTime.Equal(o.ModTime) {
		return nil, false
	}
	return d.Data, true
}

// put keeps data as the listed object o.
func (c *docCache) put(o uploader.ObjectInfo, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.docs[o.Key] = doc{Size: o.Size, ModTime: o.ModTime, Data: data}
	c.dirty = true
}

// prune drops every entry whose key the listing ls no longer shows as
// it was cached.
func (c *docCache) prune(ls *listedStore) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, d := range c.docs {
		if o, ok := ls.find(k); !ok || o.Size != d.Size || !o.ModTime.Equal(d.ModTime) {
			delete(c.docs, k)
			c.dirty = true
		}
	}
}

// cacheState is what a cache file holds: every store's documents, by
// source name and key.
type cacheState struct {
	Stores map[string]map[string]doc
}

// loadCache reads the cache file at path; a file that does not exist is
// an empty cache, any other failure an error saying why (the caller
// starts empty).
func loadCache(path string) (map[string]*docCache, error) {
	out := map[string]*docCache{}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return out, fmt.Errorf("read the fleet cache %s: %w", path, err)
	}
	if !bytes.HasPrefix(data, []byte(cacheMagic)) {
		return out, fmt.Errorf("fleet cache %s: not a cache of this version (%q expected)", path, cacheMagic[:len(cacheMagic)-1])
	}
	if len(data) < len(cacheMagic)+sha256.Size {
		return out, fmt.Errorf("fleet cache %s: truncated", path)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return out, fmt.Errorf("fleet cache %s: checksum mismatch (corrupt or truncated)", path)
	}
	var st cacheState
	if err := gob.NewDecoder(bytes.NewReader(body[len(cacheMagic):])).Decode(&st); err != nil {
		return out, fmt.Errorf("fleet cache %s: %w", path, err)
	}
	for name, docs := range st.Stores {
		if docs == nil {
			docs = map[string]doc{}
		}
		out[name] = &docCache{docs: docs}
	}
	return out, nil
}

// saveCache writes the caches to path: a temporary file in the same
// directory (0600), fsynced, renamed over path, the directory fsynced.
// The directory is created 0700 when missing.
func saveCache(path string, caches map[string]*docCache) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the fleet cache directory %s: %w", dir, err)
	}
	st := cacheState{Stores: map[string]map[string]doc{}}
	for name, c := range caches {
		c.mu.Lock()
		st.Stores[name] = c.docs
		c.dirty = false
		defer c.mu.Unlock()
	}
	f, err := os.CreateTemp(dir, CacheFile+".tmp-*")
	if err != nil {
		return fmt.Errorf("write the fleet cache in %s: %w", dir, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename: nothing
	if err := writeCache(f, st); err != nil {
		f.Close()
		return fmt.Errorf("write the fleet cache %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write the fleet cache %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write the fleet cache %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// writeCache writes the magic, the gob of st and the sha256 of both to
// f, then fsyncs it.
func writeCache(f *os.File, st cacheState) error {
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := bw.WriteString(cacheMagic); err != nil {
		return err
	}
	if err := gob.NewEncoder(bw).Encode(st); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if _, err := f.Write(h.Sum(nil)); err != nil {
		return err
	}
	return f.Sync()
}
