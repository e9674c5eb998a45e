package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// ErrReadOnly is wrapped by every write through the fleet's view of a
// store: the fleet never writes.
var ErrReadOnly = errors.New("the fleet reads stores only")

// listedStore is a store as listed once: List is served from the
// listing (so the many prefix listings of every cluster's reads cost
// one pass over the store), Get and Stat go to the store, and Put and
// Delete are refused.
type listedStore struct {
	st   uploader.Store
	objs []uploader.ObjectInfo // sorted by key
}

// listStore lists st once.
func listStore(ctx context.Context, st uploader.Store) (*listedStore, error) {
	ls := &listedStore{st: st}
	err := st.List(ctx, "", func(o uploader.ObjectInfo) error {
		ls.objs = append(ls.objs, o)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", st, err)
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

func (s *listedStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.st.Get(ctx, key)
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
		for _, a := range clusterAreas {
			if area == a {
				seen[name] = true
				out = append(out, name)
				break
			}
		}
	}
	return out
}
