package repository

import (
	"context"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

type countingGets struct {
	uploader.Store
	n atomic.Int64
}

func (c *countingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.n.Add(1)
	return c.Store.Get(ctx, key)
}

// TestCacheBound: a cache holds at most maxCached manifests; the rest
// are read on every listing, and every backup is still listed.
func TestCacheBound(t *testing.T) {
	saved := maxCached
	t.Cleanup(func() { maxCached = saved })
	maxCached = 2
	d := newDirBackups(t)
	st := &countingGets{Store: d.Store}
	b := New(st, d.Cluster)
	for i := range 5 {
		putBackup(t, b, NewID(time.Date(2026, 11, 30, 0, i, 0, 0, time.UTC), int64(i+1)), rawSnapshot(t, 1024), Encoding{Compression: "none"})
	}
	for _, want := range []int64{5, 3, 3} {
		st.n.Store(0)
		l, err := b.List(t.Context())
		if err != nil || len(l.Backups) != 5 {
			t.Fatalf("List = %v, %v; want 5 backups", l, err)
		}
		if got := st.n.Load(); got != want {
			t.Errorf("List read %d manifests; want %d (5 listed, 2 cached)", got, want)
		}
	}
	if n := len(b.cache.manifests.entries); n != 2 {
		t.Errorf("cache holds %d manifests; want 2", n)
	}
}
