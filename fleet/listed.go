package fleet

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ErrReadOnly is wrapped by every write through the fleet's view of a
// store: the fleet never writes.
var ErrReadOnly = errors.New("the fleet reads stores only")

// listedStore is a store as listed once: List is served from the
// listing (so the many prefix listings of every cluster's reads cost
// one pass over the store), Get of a small listed object is served from
// the document cache when it holds the object as listed (docs.go), else
// goes to the store and is kept; Stat goes to the store, and Put and
// Delete are refused.
type listedStore struct {
	st   uploader.Store
	objs []uploader.ObjectInfo // sorted by key
	docs *docCache             // nil: nothing cached
}

// topLister is a store that names the directories at its root without
// listing every object (uploader.S3 and uploader.Dir).
type topLister interface {
	Tops(ctx context.Context) ([]string, error)
	// Dirs names the directories under a prefix ending in "/" the same
	// way (one request, whatever they hold).
	Dirs(ctx context.Context, under string) ([]string, error)
}

// listers bounds the clusters a full read lists and reads at once: on
// S3 every cluster's listing is its own request chain, so a fleet of
// many clusters lists in the time of a few, not of one long chain of
// 1000-key pages; and memory holds these clusters' documents, not the
// store's.
const listers = 8

// listStore lists the whole of st at once (a store that cannot name
// its top-level directories; the others are listed a cluster at a
// time, listPrefix); docs, when not nil, serves and keeps the small
// objects read through it. Keys at the root (no "/") are no cluster's.
func listStore(ctx context.Context, st uploader.Store, docs *docCache) (*listedStore, error) {
	ls, err := listPrefix(ctx, st, docs, "")
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", st, err)
	}
	return ls, nil
}

// listPrefix lists the objects of st under prefix only (Refresh's
// listing of one cluster, or of its agents/ area): a listedStore that
// answers for that prefix alone.
func listPrefix(ctx context.Context, st uploader.Store, docs *docCache, prefix string) (*listedStore, error) {
	ls := &listedStore{st: st, docs: docs}
	err := st.List(ctx, prefix, func(o uploader.ObjectInfo) error {
		ls.objs = append(ls.objs, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s in %s: %w", prefix, st, err)
	}
	sort.Slice(ls.objs, func(i, j int) bool { return ls.objs[i].Key < ls.objs[j].Key })
	return ls, nil
}

func (s *listedStore) List(ctx context.Context, prefix string, fn func(uploader.ObjectInfo) error) error {
	i := sort.Search(len(s.objs), func(i int) bool { return s.objs[i].Key >= prefix })
	for ; i < len(s.objs) && strings.HasPrefix(s.objs[i].Key, prefix); i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(s.objs[i]); err != nil {
			return err
		}
	}
	return nil
}

// find returns the listed object at key.
func (s *listedStore) find(key string) (uploader.ObjectInfo, bool) {
	i := sort.Search(len(s.objs), func(i int) bool { return s.objs[i].Key >= key })
	if i < len(s.objs) && s.objs[i].Key == key {
		return s.objs[i], true
	}
	return uploader.ObjectInfo{}, false
}

// Get serves a listed object of at most maxDoc bytes from the document
// cache when it holds it with the listed size and time; otherwise it
// reads the store, and keeps what it read when its length is the listed
// size (an object replaced between the listing and the read is not
// kept under the listing's name for it).
func (s *listedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	o, ok := s.find(key)
	if s.docs == nil || !ok || o.Size > maxDoc {
		return s.st.Get(ctx, key)
	}
	if data, ok := s.docs.get(o); ok {
		return io.NopCloser(bytes.NewReader(data)), nil
	}
	rc, err := s.st.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	data, err := io.ReadAll(io.LimitReader(rc, maxDoc+1))
	if err != nil {
		rc.Close()
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if len(data) > maxDoc { // grown since the listing: the rest follows, nothing kept
		return struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(data), rc), rc}, nil
	}
	rc.Close()
	if int64(len(data)) == o.Size {
		s.docs.put(o, data)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

// fingerprint is the sha256 of every listed object under prefix (key,
// size, time): equal fingerprints are the same objects as listed.
func (s *listedStore) fingerprint(prefix string) [sha256.Size]byte {
	h := sha256.New()
	i := sort.Search(len(s.objs), func(i int) bool { return s.objs[i].Key >= prefix })
	for ; i < len(s.objs) && strings.HasPrefix(s.objs[i].Key, prefix); i++ {
		o := s.objs[i]
		fmt.Fprintf(h, "%s\x00%d\x00%d\n", o.Key, o.Size, o.ModTime.UnixNano())
	}
	return [sha256.Size]byte(h.Sum(nil))
}

func (s *listedStore) Stat(ctx context.Context, key string) (uploader.ObjectInfo, error) {
	return s.st.Stat(ctx, key)
}

func (s *listedStore) Put(_ context.Context, key string, _ io.Reader, _ uploader.PutOptions) (uploader.ObjectInfo, error) {
	return uploader.ObjectInfo{}, fmt.Errorf("put %s: %w", key, ErrReadOnly)
}

func (s *listedStore) Delete(_ context.Context, key string) error {
	return fmt.Errorf("delete %s: %w", key, ErrReadOnly)
}

func (s *listedStore) String() string { return s.st.String() }

// clusterAreas are the areas whose presence makes a top-level name a
// cluster.
var clusterAreas = []string{"snapshots", "agents", "drills", "changes", "progress", "kits"}

// isClusterArea reports whether area is one of clusterAreas.
func isClusterArea(area string) bool { return slices.Contains(clusterAreas, area) }

// clusters returns the cluster names the listing holds, sorted: every
// first path element with an object in one of clusterAreas under it.
func (s *listedStore) clusters() []string {
	seen := map[string]bool{}
	var out []string
	for _, o := range s.objs {
		name, rest, ok := strings.Cut(o.Key, "/")
		if !ok || seen[name] {
			continue
		}
		area, _, _ := strings.Cut(rest, "/")
		if isClusterArea(area) {
			seen[name] = true
			out = append(out, name)
		}
	}
	return out
}
