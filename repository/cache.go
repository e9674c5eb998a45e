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
	mu        sync.Mutex
	manifests map[string]entry[*Manifest]
	reports   map[string]entry[*DrillReport]
}

type entry[T any] struct {
	size int64
	mod  time.Time
	v    T
}

func newCache() *cache {
	return &cache{manifests: map[string]entry[*Manifest]{}, reports: map[string]entry[*DrillReport]{}}
}

// lookup returns the value cached for the listed object o in the map sel
// chooses.
func lookup[T any](c *cache, sel func(*cache) map[string]entry[T], o uploader.ObjectInfo) (T, bool) {
	var zero T
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := sel(c)[o.Key]
	if !ok || e.size != o.Size || !e.mod.Equal(o.ModTime) {
		return zero, false
	}
	return e.v, true
}

// keep replaces the map sel chooses with the entries for objs (the
// objects just listed) whose values were read (errs[i] == nil), up to
// maxCached.
func keep[T any](c *cache, sel func(*cache) *map[string]entry[T], objs []uploader.ObjectInfo, vs []T, errs []error) {
	next := make(map[string]entry[T], min(len(objs), maxCached))
	for i, o := range objs {
		if errs[i] != nil || len(next) == maxCached {
			continue
		}
		next[o.Key] = entry[T]{size: o.Size, mod: o.ModTime, v: vs[i]}
	}
	c.mu.Lock()
	*sel(c) = next
	c.mu.Unlock()
}

// manifest returns the cached manifest of the listed object o, or nil.
func (c *cache) manifest(o uploader.ObjectInfo) *Manifest {
	if c == nil {
		return nil
	}
	m, _ := lookup(c, func(c *cache) map[string]entry[*Manifest] { return c.manifests }, o)
	return m
}

// keepManifests makes the manifests of one listing the cached ones.
func (c *cache) keepManifests(objs []uploader.ObjectInfo, ms []*Manifest, errs []error) {
	if c == nil {
		return
	}
	keep(c, func(c *cache) *map[string]entry[*Manifest] { return &c.manifests }, objs, ms, errs)
}

// report returns the cached drill report of the listed object o, or nil.
func (c *cache) report(o uploader.ObjectInfo) *DrillReport {
	if c == nil {
		return nil
	}
	r, _ := lookup(c, func(c *cache) map[string]entry[*DrillReport] { return c.reports }, o)
	return r
}

// keepReports makes the reports of one listing the cached ones.
func (c *cache) keepReports(objs []uploader.ObjectInfo, rs []*DrillReport, errs []error) {
	if c == nil {
		return
	}
	keep(c, func(c *cache) *map[string]entry[*DrillReport] { return &c.reports }, objs, rs, errs)
}
