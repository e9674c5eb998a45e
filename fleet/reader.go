package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Reader reads the fleet again and again (the hub's refreshes) at a
// cost that grows with what changed. Two kinds of read:
//
//   - Read lists every store in full. A cluster whose objects are listed
//     exactly as at the last read (keys, sizes, times:
//     listedStore.fingerprint) keeps its row from then, without a
//     request, unless that row holds a read error or an unknown (those
//     are read again every time: unknown stays unknown only until it can
//     be read); a changed cluster is read again, its small objects served
//     from the document cache when listed as they were (docs.go), so only
//     new objects are fetched.
//   - Refresh (refresh.go) lists only what can have changed: the names
//     at each store's root, each cluster's agents/ area (its agents'
//     status documents, rewritten at every job end: the change signal),
//     and in full only the clusters whose signal moved, that have no
//     status document, whose row is not clean, that are new, or that the
//     hub wrote to (Touch). A change behind the agents' backs (a manual
//     delete, `lifeboat snapshot` without an agent, damage) shows at the
//     next Read.
//
// With a cache directory (NewCachedReader) the document cache survives
// restarts. Safe for one Read or Refresh at a time; Touch may be called
// at any time.
type Reader struct {
	// NoIndex has every read list every object: no cluster is read
	// through its agent's index (indexed.go), not even the first.
	NoIndex bool
	// ForgetDocs lets each cluster's documents go once it is read
	// (without a cache directory): for a single read (fleet status),
	// whose memory then holds the clusters being read, not every
	// backup of the fleet.
	ForgetDocs bool

	mu   sync.Mutex
	rows map[[2]string]cachedRow
	docs map[string]*docCache // by source name
	// others are the sources read with their names listed at the last
	// read (Refresh lists the rest in full), each with the names that
	// held no cluster then.
	others map[string]map[string]bool
	// touched are the clusters written to since the last read of them
	// (Touch): Refresh lists them in full.
	touched map[[2]string]bool
	// cacheDir is where the document cache is kept ("": in memory
	// only).
	cacheDir string
	lastSave time.Time
}

// saveEvery spaces the saves of the cache file by Read: the first read
// saves, then at most one read in saveEvery (the hub saves on exit
// too). Losing the newest minutes of it costs their objects' reads.
const saveEvery = 5 * time.Minute

// cachedRow is a clean row of a cluster, the fingerprint of the listing
// it was read from and that of its agents/ area (Refresh's signal).
type cachedRow struct {
	fp, agentsFP [32]byte
	row          Cluster
}

// NewReader returns a Reader with nothing cached.
func NewReader() *Reader {
	return &Reader{rows: map[[2]string]cachedRow{}, docs: map[string]*docCache{},
		others: map[string]map[string]bool{}, touched: map[[2]string]bool{}}
}

// NewCachedReader returns a Reader whose document cache is kept in the
// directory dir (CacheFile in it, docs.go): the agents' documents of
// every store loaded now, each cluster's when it is read. A cache that
// cannot be used (another format version, corrupt, unreadable) is
// reported in err and the Reader goes without it: what it held is read
// from the stores, never wrongly.
func NewCachedReader(dir string) (*Reader, error) {
	r := NewReader()
	r.cacheDir = dir
	if err := os.Remove(filepath.Join(dir, oldCacheFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return r, fmt.Errorf("remove the fleet cache of an older version: %w", err)
	}
	es, err := os.ReadDir(filepath.Join(dir, CacheFile))
	if errors.Is(err, os.ErrNotExist) {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read the fleet cache: %w", err)
	}
	var errs []error
	for _, e := range es {
		if !e.IsDir() {
			continue
		}
		c, err := loadDocCache(filepath.Join(dir, CacheFile, e.Name()))
		if err != nil {
			errs = append(errs, err)
		}
		if c != nil {
			r.docs[c.source] = c
		}
	}
	return r, errors.Join(errs...)
}

// Save writes what the document cache keeps in memory (the agents'
// documents) to its files when it changed since the last save (nothing
// without a cache directory); the clusters' files are written as each
// cluster's read ends.
func (r *Reader) Save() error {
	r.mu.Lock()
	caches := slices.Collect(maps.Values(r.docs))
	r.mu.Unlock()
	var errs []error
	for _, c := range caches {
		errs = append(errs, c.save())
	}
	return errors.Join(errs...)
}

// Touch says that cluster in the source named store was written to by
// this process (the hub's drill reports): the next Refresh lists it in
// full, whatever its signal says.
func (r *Reader) Touch(store, cluster string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.touched[[2]string{store, cluster}] = true
}

// takeTouched returns the clusters of the source touched since the
// last call and forgets them: a Touch during a read counts for the next
// one.
func (r *Reader) takeTouched(source string) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := map[string]bool{}
	for k := range r.touched {
		if k[0] == source {
			t[k[1]] = true
			delete(r.touched, k)
		}
	}
	return t
}

// docCache is the document cache of the source named name.
func (r *Reader) docCache(name string) *docCache {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.docs[name]
	if c == nil {
		c = newDocCache()
		if r.cacheDir != "" {
			c.dir, c.source = filepath.Join(r.cacheDir, CacheFile, hashName(name)), name
		}
		c.forgetRead = r.ForgetDocs
		r.docs[name] = c
	}
	return c
}

// cached returns the cluster's clean row of the last read.
func (r *Reader) cached(k [2]string) (cachedRow, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c, ok := r.rows[k]
	return c, ok
}

// row returns the cluster's row of the last read when its listing's
// fingerprint is still fp.
func (r *Reader) row(k [2]string, fp [32]byte) (Cluster, bool) {
	c, ok := r.cached(k)
	return c.row, ok && c.fp == fp
}

// keepRow keeps a cluster's row for the next read when it was read
// without an error or an unknown.
func (r *Reader) keepRow(k [2]string, cr cachedRow) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cr.row.clean() {
		r.rows[k] = cr
	} else {
		delete(r.rows, k)
	}
}

// dropRow forgets the cluster's row: its next read is in full.
func (r *Reader) dropRow(k [2]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.rows, k)
}

// clean reports whether everything of the row was read: no read error,
// no unknown drill, no agent document or kit that could not be read.
func (c *Cluster) clean() bool {
	return c.ReadError == "" && (c.Drill == nil || c.Drill.State != repository.DrillUnknown) &&
		len(c.AgentErrors) == 0 && (c.Kit == nil || c.Kit.Error == "")
}

// Read is the package's Read, keeping what it read for the next: every
// store is listed in full.
func (r *Reader) Read(ctx context.Context, sources []Source, lg *slog.Logger) ([]Cluster, error) {
	return r.read(ctx, sources, lg, r.readSource)
}

// read reads every source with readSource, sorts the rows and saves the
// cache file when due.
func (r *Reader) read(ctx context.Context, sources []Source, lg *slog.Logger,
	readSource func(context.Context, Source, *slog.Logger) ([]Cluster, error)) ([]Cluster, error) {
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	var out []Cluster
	for _, src := range sources {
		rows, err := readSource(ctx, src, lg)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Store != out[j].Store {
			return out[i].Store < out[j].Store
		}
		return out[i].Name < out[j].Name
	})
	if r.lastSave.IsZero() || time.Since(r.lastSave) >= saveEvery {
		if err := r.Save(); err != nil {
			lg.Warn("cannot save the fleet cache (the next start reads the stores cold)", "err", err)
		}
		r.lastSave = time.Now()
	}
	return out, nil
}

// readSource reads one store in full; only the end of ctx fails it. A
// store that names its top-level directories is read a directory at a
// time (readTops: each listed, read and let go, readers at once, so
// that memory holds the clusters being read, not the whole store's
// listing); another is listed whole first (readWhole).
func (r *Reader) readSource(ctx context.Context, src Source, lg *slog.Logger) ([]Cluster, error) {
	r.takeTouched(src.Name) // a full listing sees every write
	tl, ok := src.Store.(topLister)
	if !ok {
		return r.readWhole(ctx, src, lg)
	}
	docs := r.docCache(src.Name)
	// The store's first read (nothing of it cached) reads through the
	// agents' indexes; every later one lists every object.
	_, listed := r.othersOf(src.Name)
	var idx topLister
	if !listed && !r.NoIndex {
		idx = tl
	}
	return r.readTops(ctx, src, lg, tl, listers, func(top string) *Cluster {
		return r.relist(ctx, src, docs, top, idx)
	})
}

// readTops lists the store's top-level names and returns the rows read
// of each, n at a time, by row (nil: top holds no cluster). Every name
// goes to row, those that held no cluster at the last read too
// (Refresh's row checks them with one request: refreshCluster).
func (r *Reader) readTops(ctx context.Context, src Source, lg *slog.Logger, tl topLister, n int, row func(top string) *Cluster) ([]Cluster, error) {
	tops, err := tl.Tops(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.setOthers(src.Name, nil)
		return []Cluster{{Store: src.Name, Name: "*", ReadError: fmt.Sprintf("list %s: %v", src.Store, err)}}, nil
	}
	rows := make([]*Cluster, len(tops))
	var wg sync.WaitGroup
	sem := make(chan struct{}, n)
	for i, top := range tops {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rows[i] = row(top)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	clusters, others := map[string]bool{}, map[string]bool{}
	var out []Cluster
	for i, c := range rows {
		if c == nil {
			others[tops[i]] = true
			continue
		}
		clusters[tops[i]] = true
		out = append(out, *c)
	}
	r.setOthers(src.Name, others)
	r.forget(src.Name, clusters)
	docs := r.docCache(src.Name)
	docs.forget(clusters)
	logCacheErrors(lg, docs)
	logReadErrors(lg, src, out)
	return out, nil
}

// readWhole lists the whole store at once and reads the clusters whose
// objects changed, readers at a time.
func (r *Reader) readWhole(ctx context.Context, src Source, lg *slog.Logger) ([]Cluster, error) {
	docs := r.docCache(src.Name)
	ls, err := listStore(ctx, src.Store, docs)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		r.setOthers(src.Name, nil)
		return []Cluster{{Store: src.Name, Name: "*", ReadError: err.Error()}}, nil
	}
	names := ls.clusters()
	rows := make([]Cluster, len(names))
	var wg sync.WaitGroup
	sem := make(chan struct{}, readers)
	for i, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			rows[i] = r.readListed(ctx, ls, src, name, time.Time{})
			docs.pruneUnder(ls, name+"/")
			docs.release(name)
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	docs.prune(ls)
	logCacheErrors(lg, docs)
	r.setOthers(src.Name, map[string]bool{}) // Refresh reads such a store in full
	r.forget(src.Name, setOf(names))
	logReadErrors(lg, src, rows)
	return rows, nil
}

// readListed is the row of cluster from ls, a listing that holds all of
// its objects: the row of the last read when they are listed as then,
// else the cluster read again (and kept when clean).
//
// indexed is the time of the index ls was listed through (zero: listed
// in full): the row says it, and a row kept from a read through an
// index and now listed in full as it said no longer does.
func (r *Reader) readListed(ctx context.Context, ls *listedStore, src Source, name string, indexed time.Time) Cluster {
	k := [2]string{src.Name, name}
	cr := cachedRow{fp: ls.fingerprint(name + "/"), agentsFP: ls.fingerprint(agentsPrefix(name))}
	if row, ok := r.row(k, cr.fp); ok {
		row.IndexedAt = indexed
		cr.row = row
		r.keepRow(k, cr) // the agents' fingerprint as listed now
		return row
	}
	cr.row = readCluster(ctx, ls, src, name, r.newRepo(ls, src, name))
	cr.row.IndexedAt = indexed
	if ctx.Err() == nil {
		r.keepRow(k, cr)
	}
	return cr.row
}

// newRepo is cluster's repository in st with the source's trust. A new
// one for each read: parsed documents are not kept between reads (the
// document cache keeps their bytes), so memory does not grow with every
// backup of every cluster.
func (r *Reader) newRepo(st uploader.Store, src Source, cluster string) *repository.Repo {
	repo := repository.New(st, cluster)
	repo.Trust = src.Trust
	return repo
}

// agentsPrefix is the agents/ area of cluster.
func agentsPrefix(cluster string) string { return cluster + "/agents/" }

func logReadErrors(lg *slog.Logger, src Source, rows []Cluster) {
	for _, r := range rows {
		if r.ReadError != "" {
			lg.Warn("cannot read cluster", "store", src.Name, "cluster", r.Name, "err", r.ReadError)
		}
	}
}

// logCacheErrors logs the cache files that could not be used or
// written: what they held is read from the store.
func logCacheErrors(lg *slog.Logger, docs *docCache) {
	for _, err := range docs.takeErrors() {
		lg.Warn("the fleet cache file cannot be used: its documents are read from the store", "err", err)
	}
}

func setOf(names []string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// setOthers records the source's names that held no cluster at its
// last read (nil: its names could not be listed, the next Refresh of it
// lists it in full).
func (r *Reader) setOthers(source string, others map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if others == nil {
		delete(r.others, source)
		return
	}
	r.others[source] = others
}

// forget drops the rows of the source's clusters that are no longer
// listed.
func (r *Reader) forget(source string, listed map[string]bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.rows {
		if k[0] == source && !listed[k[1]] {
			delete(r.rows, k)
		}
	}
}
