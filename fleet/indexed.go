package fleet

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// A cold read through the agents' indexes (repository.Index). The first
// read of a store by a Reader (a `fleet status`, a hub's start) has
// nothing cached, and listing every backup and reading every manifest
// of a fleet costs a request per object. A cluster whose agent keeps an
// index is read instead from its newest index:
//
//   - the cluster's areas other than snapshots/ and changes/ listed as
//     usual;
//   - snapshots/ as the index lists it, plus what sorts after the
//     index's newest key there (backup ids sort by time: what was stored
//     since);
//   - the change objects of the generations the index lists as it lists
//     them, and of a generation it lists as open (the live one) what
//     sorts after its newest there (segment names sort by revision: what
//     was stored since; compaction since is not seen); a generation it
//     does not list, from the store;
//   - the documents the index carries served from the document cache,
//     where they stay for the next read.
//
// Every manifest and drill report is still parsed and checked against
// its own signature; the index's own signature vouches for which objects
// exist. The row says so (Cluster.IndexedAt): damage or a deletion
// behind the agent's back since it wrote the index is not seen by this
// read. Every later full read of the store lists every object (a
// cluster listed as its index said keeps its row, now checked), and
// `fleet status --full` reads so from the start.

// afterLister is a store that lists the keys after a given one without
// transferring the ones before (uploader.S3 and uploader.Dir).
type afterLister interface {
	ListAfter(ctx context.Context, prefix, after string, fn func(uploader.ObjectInfo) error) error
}

// listIndexed lists cluster top through its newest index (above). nil
// when it has none that can be used (none, unreadable, untrusted, or a
// store that cannot list after a key, or a listing failed): the caller
// lists it in full, which says what cannot be read.
func (r *Reader) listIndexed(ctx context.Context, src Source, docs *docCache, tl topLister, top string) (*listedStore, time.Time) {
	al, ok := src.Store.(afterLister)
	if !ok {
		return nil, time.Time{}
	}
	ls := &listedStore{st: src.Store, docs: docs}
	add := func(o uploader.ObjectInfo) error {
		ls.objs = append(ls.objs, o)
		return nil
	}
	// The index area first: a cluster without one costs one request.
	if err := src.Store.List(ctx, top+"/index/", add); err != nil {
		return nil, time.Time{}
	}
	repo := r.newRepo(src.Store, src, top)
	key := repo.NewestIndexKey(ls.objs)
	if key == "" {
		return nil, time.Time{}
	}
	idx, err := repo.ReadIndex(ctx, key)
	if err != nil {
		return nil, time.Time{}
	}
	areas, err := tl.Dirs(ctx, top+"/")
	if err != nil {
		return nil, time.Time{}
	}
	for _, area := range areas {
		switch area {
		case "snapshots", "index":
			continue
		case "changes":
			if err := listChanges(ctx, src.Store, tl, idx, top, add); err != nil {
				return nil, time.Time{}
			}
			continue
		}
		if err := src.Store.List(ctx, top+"/"+area+"/", add); err != nil {
			return nil, time.Time{}
		}
	}
	last := ""
	for _, o := range idx.Snapshots {
		ls.objs = append(ls.objs, o.Info())
		last = max(last, o.Key)
	}
	if last == "" {
		last = top + "/snapshots/"
	}
	if err := al.ListAfter(ctx, top+"/snapshots/", last, add); err != nil {
		return nil, time.Time{}
	}
	sort.Slice(ls.objs, func(i, j int) bool { return ls.objs[i].Key < ls.objs[j].Key })
	ls.objs = slices.CompactFunc(ls.objs, func(a, b uploader.ObjectInfo) bool { return a.Key == b.Key })
	for _, d := range idx.Docs {
		if o, ok := ls.find(d.Key); ok && o.Size == d.Size && o.ModTime.Equal(d.ModTime) && o.Size <= maxDoc {
			docs.put(o, []byte(d.Data))
		}
	}
	return ls, idx.WrittenAt
}

// listChanges lists cluster top's change objects: a generation the index
// lists as sealed as the index lists it, every other one (the live one)
// from the store; a generation no longer stored is not listed.
func listChanges(ctx context.Context, st uploader.Store, tl topLister, idx *repository.Index, top string, add func(uploader.ObjectInfo) error) error {
	dir := top + "/changes/"
	gens, err := tl.Dirs(ctx, dir)
	if err != nil {
		return err
	}
	listed := map[string][]repository.IndexObject{}
	for _, g := range idx.Sealed {
		listed[g] = nil
	}
	open := map[string]bool{}
	for _, g := range idx.Open {
		listed[g], open[g] = nil, true
	}
	for _, o := range idx.Changes {
		g, _, _ := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		listed[g] = append(listed[g], o)
	}
	al, _ := st.(afterLister)
	for _, g := range gens {
		objs, ok := listed[g]
		if !ok || (open[g] && al == nil) {
			if err := st.List(ctx, dir+g+"/", add); err != nil {
				return err
			}
			continue
		}
		last := dir + g + "/"
		for _, o := range objs {
			if err := add(o.Info()); err != nil {
				return err
			}
			last = max(last, o.Key)
		}
		if open[g] {
			// Its segments since the index: names sort by revision.
			if err := al.ListAfter(ctx, dir+g+"/", last, add); err != nil {
				return err
			}
		}
	}
	return nil
}
