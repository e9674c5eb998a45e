package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Select resolves a drill or restore target: a backup id, "latest" (the
// newest backup whose data object is present) or "random": a backup chosen
// with intn (like math/rand.IntN) among the intact ones other than the
// newest, so that over time every retained backup gets drilled; the newest
// when it is the only one.
func Select(ctx context.Context, b *uploader.Backups, ref string, intn func(int) int) (*uploader.Manifest, error) {
	if ref != "random" {
		return b.Resolve(ctx, ref)
	}
	l, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	var ok []*uploader.Manifest
	for _, e := range l.Backups {
		if e.State == uploader.StateOK {
			ok = append(ok, e.Manifest)
		}
	}
	switch len(ok) {
	case 0:
		return nil, fmt.Errorf("%w of cluster %q in %s", uploader.ErrNoBackups, b.Cluster, b.Store)
	case 1:
		return ok[0], nil
	}
	older := ok[1:] // newest first
	return older[intn(len(older))], nil
}

// SelectBefore returns the newest intact backup created before t: the
// last good state before an incident.
func SelectBefore(ctx context.Context, b *uploader.Backups, t time.Time) (*uploader.Manifest, error) {
	l, err := b.List(ctx)
	if err != nil {
		return nil, err
	}
	for _, e := range l.Backups { // newest first
		if e.State == uploader.StateOK && e.Manifest.CreatedAt.Before(t) {
			return e.Manifest, nil
		}
	}
	return nil, fmt.Errorf("%w of cluster %q in %s taken before %s", uploader.ErrNoBackups, b.Cluster, b.Store, t.UTC().Format(time.RFC3339))
}
