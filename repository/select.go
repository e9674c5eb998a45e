package repository

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ErrNotProven is wrapped when no backup's last drill passed
// (latest-proven).
var ErrNotProven = errors.New("no proven backup")

// Select resolves a drill or restore target: a backup id, "latest" (the
// newest backup whose data object is present), "latest-proven" (the newest
// intact backup whose last drill passed, see SelectProven) or "random": a
// backup chosen with intn (like math/rand.IntN) among the intact ones other
// than the newest, so that over time every retained backup gets drilled;
// the newest when it is the only one.
func Select(ctx context.Context, b *Repo, ref string, intn func(int) int) (*Manifest, error) {
	if ref == "latest-proven" {
		return SelectProven(ctx, b)
	}
	if ref != "random" {
		return b.Resolve(ctx, ref)
	}
	ok, err := b.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	switch len(ok) {
	case 0:
		return nil, b.noBackups(ctx, "")
	case 1:
		return ok[0], nil
	}
	older := ok[1:] // newest first
	return older[intn(len(older))], nil
}

// SelectBefore returns the newest intact backup whose state is from
// before t (its RevisionTime: every write it holds was made before): the
// last good state before an incident.
func SelectBefore(ctx context.Context, b *Repo, t time.Time) (*Manifest, error) {
	c, err := b.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	for _, m := range c { // newest first
		if m.RevisionTime().Before(t) {
			return m, nil
		}
	}
	return nil, b.noBackups(ctx, " taken before "+t.UTC().Format(time.RFC3339))
}

// SelectProven returns the newest intact backup whose last drill passed:
// the one to prefer in a restore. Only the newest report of a backup
// counts (Repo.LastDrills); a backup whose newest report
// cannot be read is not proven, never judged by an older, happier report.
func SelectProven(ctx context.Context, b *Repo) (*Manifest, error) {
	c, err := b.Candidates(ctx)
	if err != nil {
		return nil, err
	}
	drills, err := b.LastDrills(ctx)
	if err != nil {
		return nil, err
	}
	unknown := 0
	for _, m := range c { // newest first
		d := drills[m.ID]
		switch d.State() {
		case DrillUnknown:
			unknown++
		case DrillPassed:
			if d.BackupID == m.ID {
				return m, nil
			}
		}
	}
	msg := ""
	if unknown > 0 {
		msg = fmt.Sprintf(" (the last drill of %d could not be read)", unknown)
	}
	return nil, fmt.Errorf("%w of cluster %q in %s: no backup's last drill passed%s; run `lifeboat drill latest`, or give a backup id or latest", ErrNotProven, b.Cluster, b.Store, msg)
}
