package repository

import (
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// maxCached bounds the entries of each kind (manifests, drill reports) a
// cache holds, about 1 KiB each: a repository with more backups than this
// reads the rest on every listing, as an uncached Repo does. (A variable
// for TestCacheBound.)
var maxCached = 10000

// cache holds parsed manifests and drill reports by object key. They are
// immutable once written, so a read is needed only for a key not seen
// before; an entry also records the size and time the store listed the
// object with, and a listing that shows other values (the object was
// deleted and written again) reads it anew. The listing decides what
// exists: an entry serves only a key listed now, and each listing drops
// the entries of keys it no longer shows. Only objects that were read and
// parsed are cached: an unreadable one is read again next time (unknown
// stays unknown until it can be read). A nil *cache caches nothing.
type cache struct {
	manifests docCache[Manifest]
	reports   docCache[DrillReport]
	markers   docCache[Progress] // read by Windows with signing on (checked)
}

// docCache is the cache of one kind of document, by object key.
type docCache[T any] struct {
	mu      sync.Mutex
	entries map[string]entry[T]
}

type entry[T any] struct {
	size int64
	mod  time.Time
	v    *T
}

func newCache() *cache { return &cache{} }

// get returns the document cached for the listed object o, or nil.
func (d *docCache[T]) get(o uploader.ObjectInfo) *T {
	d.mu.Lock()
	defer d.mu.Unlock()
	e, ok := d.entries[o.Key]
	if !ok || e.size != o.Size || !e.mod.Equal(o.ModTime) {
		return nil
	}
	return e.v
}

// keep makes the documents of one listing (objs, just listed) the cached
// ones: those that were read (errs[i] == nil), up to maxCached.
func (d *docCache[T]) keep(objs []uploader.ObjectInfo, vs []*T, errs []error) {
	next := make(map[string]entry[T], min(len(objs), maxCached))
	for i, o := range objs {
		if errs[i] != nil || len(next) == maxCached {
			continue
		}
		next[o.Key] = entry[T]{size: o.Size, mod: o.ModTime, v: vs[i]}
	}
	d.mu.Lock()
	d.entries = next
	d.mu.Unlock()
}

// manifest returns the cached manifest of the listed object o, or nil.
func (c *cache) manifest(o uploader.ObjectInfo) *Manifest {
	if c == nil {
		return nil
	}
	return c.manifests.get(o)
}

// keepManifests makes the manifests of one listing the cached ones.
func (c *cache) keepManifests(objs []uploader.ObjectInfo, ms []*Manifest, errs []error) {
	if c != nil {
		c.manifests.keep(objs, ms, errs)
	}
}

// report returns the cached drill report of the listed object o, or nil.
func (c *cache) report(o uploader.ObjectInfo) *DrillReport {
	if c == nil {
		return nil
	}
	return c.reports.get(o)
}

// keepReports makes the reports of one listing the cached ones.
func (c *cache) keepReports(objs []uploader.ObjectInfo, rs []*DrillReport, errs []error) {
	if c != nil {
		c.reports.keep(objs, rs, errs)
	}
}

// marker returns the cached progress marker of the listed object o, or nil.
func (c *cache) marker(o uploader.ObjectInfo) *Progress {
	if c == nil {
		return nil
	}
	return c.markers.get(o)
}

// keepMarkers makes the markers of one listing the cached ones.
func (c *cache) keepMarkers(objs []uploader.ObjectInfo, ps []*Progress, errs []error) {
	if c != nil {
		c.markers.keep(objs, ps, errs)
	}
}
