package fleet

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/gob"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
// Without a directory every document is kept in memory. With one
// (fleet.cache_dir) a cluster's documents live in its own file, loaded
// when the cluster is read and let go after (release): memory holds the
// documents of the clusters being read, not of every backup of the
// fleet. The agents' status documents, rewritten every minute, stay in
// memory and go to one file per store at Save. The files are under
// CacheFile in the directory, one subdirectory per store: each written
// to a temporary name and renamed (not fsynced: a file a crash tore
// fails its trailer and is read cold, so durability buys nothing a
// cache needs, and the hub's cold read writes a file per cluster),
// 0600 in 0700 directories,
// with a version line and a sha256 trailer. A file that is missing, of
// another format version, truncated, corrupt or of another store or
// cluster is ignored and rebuilt from the stores: it costs a cold read
// of what it held, never a wrong answer.

// maxDoc bounds the objects cached: the fleet's documents are a few
// KiB; change segments and data objects are never read by the fleet.
const maxDoc = 64 << 10

// cacheMagic starts a cache file; its number is the format version.
const cacheMagic = "lifeboat fleet cache 2\n"

// CacheFile is the cache's directory in fleet.cache_dir.
const CacheFile = "fleet-cache.v2"

// oldCacheFile is the single cache file of format 1, removed when
// found (its documents are read again once).
const oldCacheFile = "fleet-cache.v1"

// hotFile names a store's file of agent status documents.
const hotFile = "agents"

// doc is one cached object's bytes with what the listing showed.
type doc struct {
	Size    int64
	ModTime time.Time
	Data    []byte
}

// docCache is the document cache of one store. Safe for concurrent use;
// a cluster is read by one goroutine at a time (load and release are
// not counted).
type docCache struct {
	mu sync.Mutex
	// dir holds the store's files ("": memory only); source is the
	// store's name, written into each file.
	dir, source string
	// hot are the agents' status documents, by key; hotDirty when they
	// changed since the last save.
	hot      map[string]doc
	hotDirty bool
	clusters map[string]*clusterDocs
	// loadErrs are the files that could not be used or written since
	// the last takeErrors.
	loadErrs []error
	// forgetRead: without a directory, release lets a cluster's documents
	// go instead of keeping them (Reader.ForgetDocs).
	forgetRead bool
}

// clusterDocs are one cluster's documents other than its agents'.
type clusterDocs struct {
	docs map[string]doc // nil: on disk, not loaded
	// dirty: docs differ from the cluster's file.
	dirty bool
}

func newDocCache() *docCache {
	return &docCache{hot: map[string]doc{}, clusters: map[string]*clusterDocs{}}
}

// isHot reports whether key is an agent status document.
func isHot(key string) bool {
	_, rest, _ := strings.Cut(key, "/")
	return strings.HasPrefix(rest, "agents/")
}

func clusterOf(key string) string {
	c, _, _ := strings.Cut(key, "/")
	return c
}

// docsOf returns the cluster's documents, loading its file when they
// are on disk. Called with c.mu held.
func (c *docCache) docsOf(cluster string) *clusterDocs {
	cd := c.clusters[cluster]
	if cd == nil {
		cd = &clusterDocs{}
		c.clusters[cluster] = cd
	}
	if cd.docs == nil {
		cd.docs = map[string]doc{}
		if c.dir != "" {
			docs, err := loadFile(c.clusterFile(cluster), c.source, cluster)
			if err != nil {
				c.loadErrs = append(c.loadErrs, err)
			} else if docs != nil {
				cd.docs = docs
			}
		}
	}
	return cd
}

// get returns the bytes cached for the listed object o.
func (c *docCache) get(o uploader.ObjectInfo) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.hot
	if !isHot(o.Key) {
		m = c.docsOf(clusterOf(o.Key)).docs
	}
	d, ok := m[o.Key]
	if !ok || d.Size != o.Size || !d.ModTime.Equal(o.ModTime) {
		return nil, false
	}
	return d.Data, true
}

// put keeps data as the listed object o.
func (c *docCache) put(o uploader.ObjectInfo, data []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	d := doc{Size: o.Size, ModTime: o.ModTime, Data: data}
	if isHot(o.Key) {
		c.hot[o.Key], c.hotDirty = d, true
		return
	}
	cd := c.docsOf(clusterOf(o.Key))
	cd.docs[o.Key], cd.dirty = d, true
}

// pruneUnder drops every entry under prefix (a cluster's, or its
// agents/ area) that the listing ls of that prefix no longer shows as
// it was cached; the rest is kept. A cluster's documents on disk and not
// loaded are left: an entry is served only for an object listed as it
// was, and release prunes them when they are next loaded.
func (c *docCache) pruneUnder(ls *listedStore, prefix string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	gone := func(k string, d doc) bool {
		o, ok := ls.find(k)
		return strings.HasPrefix(k, prefix) && (!ok || o.Size != d.Size || !o.ModTime.Equal(d.ModTime))
	}
	for k, d := range c.hot {
		if gone(k, d) {
			delete(c.hot, k)
			c.hotDirty = true
		}
	}
	if cd := c.clusters[clusterOf(prefix)]; cd != nil {
		for k, d := range cd.docs {
			if gone(k, d) {
				delete(cd.docs, k)
				cd.dirty = true
			}
		}
	}
}

// prune drops every entry the listing ls of the whole store no longer
// shows as it was cached (the clusters on disk: those loaded).
func (c *docCache) prune(ls *listedStore) {
	for _, name := range c.names() {
		c.pruneUnder(ls, name+"/")
	}
	c.forget(setOf(ls.clusters()))
}

// names are the clusters with documents in memory or on disk.
func (c *docCache) names() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for name := range c.clusters {
		out = append(out, name)
	}
	for k := range c.hot {
		out = append(out, clusterOf(k))
	}
	return out
}

// forget drops the documents (and files) of every cluster not in
// listed.
func (c *docCache) forget(listed map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k := range c.hot {
		if !listed[clusterOf(k)] {
			delete(c.hot, k)
			c.hotDirty = true
		}
	}
	for name := range c.clusters {
		if !listed[name] {
			delete(c.clusters, name)
		}
	}
	if c.dir == "" {
		return
	}
	// The files of clusters gone, also while no hub ran.
	keep := map[string]bool{hotFile: true}
	for name := range listed {
		keep[filepath.Base(c.clusterFile(name))] = true
	}
	es, _ := os.ReadDir(c.dir) // none yet: nothing to remove
	for _, e := range es {
		if strings.HasPrefix(e.Name(), "c-") && !keep[e.Name()] {
			os.Remove(filepath.Join(c.dir, e.Name()))
		}
	}
}

// release ends a read of cluster: with a directory, its documents are
// written to its file when they changed and let go from memory. A file
// that cannot be written is reported (takeErrors): its documents are
// read from the store again next time.
func (c *docCache) release(cluster string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cd := c.clusters[cluster]
	if cd != nil && c.dir == "" && c.forgetRead {
		delete(c.clusters, cluster)
		return
	}
	if c.dir == "" || cd == nil || cd.docs == nil {
		return
	}
	var err error
	if cd.dirty {
		err = saveFile(c.clusterFile(cluster), fileState{Source: c.source, Cluster: cluster, Docs: cd.docs})
	}
	cd.docs, cd.dirty = nil, false
	if err != nil {
		os.Remove(c.clusterFile(cluster))
		c.loadErrs = append(c.loadErrs, err)
	}
}

// save writes the agents' documents to the store's file when they
// changed.
func (c *docCache) save() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.dir == "" || !c.hotDirty {
		return nil
	}
	if err := saveFile(filepath.Join(c.dir, hotFile), fileState{Source: c.source, Docs: c.hot}); err != nil {
		return err
	}
	c.hotDirty = false
	return nil
}

// takeErrors returns the cache files that could not be used or written
// since the last call.
func (c *docCache) takeErrors() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := c.loadErrs
	c.loadErrs = nil
	return errs
}

// clusterFile is the file of cluster's documents: named by a hash, as a
// cluster's name may hold what a file name cannot.
func (c *docCache) clusterFile(cluster string) string {
	return filepath.Join(c.dir, "c-"+hashName(cluster))
}

func hashName(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:16])
}

// loadDocCache is the cache of one store in its directory dir (named
// by the hash of the store's name): its agents' documents loaded now,
// the clusters' files when each is read. nil when the directory holds
// no usable agents' file (err says why when it is unusable): that
// store's cache starts anew when it is read.
func loadDocCache(dir string) (*docCache, error) {
	st, err := loadState(filepath.Join(dir, hotFile))
	if err != nil || st == nil {
		return nil, err
	}
	if st.Cluster != "" || hashName(st.Source) != filepath.Base(dir) {
		return nil, fmt.Errorf("fleet cache %s: holds store %q cluster %q, not this directory's agents", dir, st.Source, st.Cluster)
	}
	c := newDocCache()
	c.dir, c.source, c.hot = dir, st.Source, st.Docs
	return c, nil
}

// fileState is what a cache file holds: one store's agent documents
// (Cluster "") or one cluster's other documents, by key.
type fileState struct {
	Source, Cluster string
	Docs            map[string]doc
}

// loadFile reads the cache file at path, of the store named source and
// the cluster (""): the agents' documents). A file that does not exist
// is nil and no error; any other failure an error saying why (the
// caller goes without).
func loadFile(path, source, cluster string) (map[string]doc, error) {
	st, err := loadState(path)
	if err != nil || st == nil {
		return nil, err
	}
	if st.Source != source || st.Cluster != cluster {
		return nil, fmt.Errorf("fleet cache %s: holds store %q cluster %q, not store %q cluster %q", path, st.Source, st.Cluster, source, cluster)
	}
	return st.Docs, nil
}

// loadState reads the cache file at path: nil and no error when it does
// not exist.
func loadState(path string) (*fileState, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the fleet cache %s: %w", path, err)
	}
	if !bytes.HasPrefix(data, []byte(cacheMagic)) {
		return nil, fmt.Errorf("fleet cache %s: not a cache of this version (%q expected)", path, cacheMagic[:len(cacheMagic)-1])
	}
	if len(data) < len(cacheMagic)+sha256.Size {
		return nil, fmt.Errorf("fleet cache %s: truncated", path)
	}
	body, sum := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return nil, fmt.Errorf("fleet cache %s: checksum mismatch (corrupt or truncated)", path)
	}
	var st fileState
	if err := gob.NewDecoder(bytes.NewReader(body[len(cacheMagic):])).Decode(&st); err != nil {
		return nil, fmt.Errorf("fleet cache %s: %w", path, err)
	}
	if st.Docs == nil {
		st.Docs = map[string]doc{}
	}
	return &st, nil
}

// saveFile writes st to path: a temporary file in the same directory
// (0600), renamed over path (no fsync: above). The directory is created
// 0700 when missing.
func saveFile(path string, st fileState) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create the fleet cache directory %s: %w", dir, err)
	}
	f, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
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
	return nil
}

// writeCache writes the magic, the gob of st and the sha256 of both to
// f.
func writeCache(f *os.File, st fileState) error {
	if err := f.Chmod(0o600); err != nil {
		return err
	}
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 64<<10)
	if _, err := bw.WriteString(cacheMagic); err != nil {
		return err
	}
	if err := gob.NewEncoder(bw).Encode(st); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	_, err := f.Write(h.Sum(nil))
	return err
}
