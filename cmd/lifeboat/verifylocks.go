package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// errLocksShort is returned (exit 1) when verify --locks found an object a
// restore needs that is unlocked or locked for too short a time.
var errLocksShort = errors.New("objects a restore needs are not locked for as long as the policy says")

// lockNeed is one object a retained backup, window or kit needs, and
// until when its lock must hold.
type lockNeed struct {
	what   string // backup, manifest, kit, kit manifest, segment, marker
	key    string
	need   time.Time
	period time.Duration // the policy's lock of its kind
}

// runVerifyLocks reads the Object Lock retention of every object a
// retained backup, window or kit needs (data objects and manifests of the
// intact backups, their kits' objects and manifests, the segments on each
// recoverable window's path and its newest markers) from the store (Stat:
// on a copy, the copy's locks, whatever the copied manifest says), and
// lists any that is unlocked or whose retain-until falls before what the
// store's lock policy (store.object_lock, repository.LockPolicy) gives an
// object of its kind written when it was. An object whose policy lock has
// run out by now is not needed locked any more and is not listed.
func runVerifyLocks(ctx context.Context, cfg *Config, lg *slog.Logger, out io.Writer) error {
	b, err := openBackups(ctx, cfg, lg)
	if err != nil {
		return err
	}
	if b.Lock.Retention.Mode == "" {
		return usagef("verify --locks needs store.object_lock (--object-lock-mode and --object-lock-retain): it checks the locks against that policy")
	}
	now := time.Now()
	needs, err := lockNeeds(ctx, b, now)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	bad := 0
	for _, n := range needs {
		if !n.need.After(now) {
			continue
		}
		info, err := b.Store.Stat(ctx, n.key)
		if errors.Is(err, uploader.ErrNotFound) {
			continue // deleted since the listing (prune): not needed
		}
		if err != nil {
			return fmt.Errorf("verify locks: %w", err)
		}
		problem := lockProblem(info, n.need, lockSlack(n.period), b.Lock.Retention.Mode)
		if problem == "" {
			continue
		}
		if bad == 0 {
			fmt.Fprintln(tw, "KIND\tKEY\tLOCK\tRETAIN UNTIL\tNEEDED UNTIL\tPROBLEM")
		}
		bad++
		until := "-"
		if !info.RetainUntil.IsZero() {
			until = info.RetainUntil.UTC().Format(time.RFC3339)
		}
		mode := info.LockMode
		if mode == "" {
			mode = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", n.what, n.key, mode, until, n.need.UTC().Format(time.RFC3339), problem)
	}
	tw.Flush()
	fmt.Fprintf(out, "summary: %d object(s) a restore needs in %s (cluster %q), %d not locked as store.object_lock (%s, %s) requires\n",
		len(needs), b.Store, cfg.Cluster, bad, b.Lock.Retention.Mode, b.Lock.Retention.For)
	if bad > 0 {
		return fmt.Errorf("%w: %d object(s)", errLocksShort, bad)
	}
	return nil
}

// lockSlack is how much earlier than the policy's time a retain-until may
// be: the writer takes its clock before the store stamps the object.
func lockSlack(d time.Duration) time.Duration { return max(time.Minute, d/100) }

// lockProblem says what is wrong with info's lock for an object needed
// locked until need (less slack) in mode, "" when nothing is.
func lockProblem(info uploader.ObjectInfo, need time.Time, slack time.Duration, mode string) string {
	switch {
	case info.LegalHold:
		return ""
	case info.LockMode == "":
		return "unlocked"
	case info.RetainUntil.Before(need.Add(-slack)):
		return fmt.Sprintf("lock ends %s early", need.Sub(info.RetainUntil).Round(time.Second))
	case mode == uploader.LockCompliance && info.LockMode != uploader.LockCompliance:
		return "GOVERNANCE, the policy says COMPLIANCE"
	}
	return ""
}

// lockNeeds lists what the intact backups, their kits and the recoverable
// windows of b need, each with the time its lock must hold until by b's
// policy: written (the store's time) plus the period of its kind; a kit
// for as long as the newest backup that names it.
func lockNeeds(ctx context.Context, b *repository.Repo, now time.Time) ([]lockNeed, error) {
	l, err := b.List(ctx)
	if err != nil {
		return nil, fmt.Errorf("verify locks: %w", err)
	}
	p := b.Lock
	var needs []lockNeed
	kits := map[string]time.Time{}
	for _, e := range l.Backups {
		if e.State != repository.StateOK {
			continue
		}
		m := e.Manifest
		mk := b.ManifestKey(m.ID)
		mi, err := b.Store.Stat(ctx, mk)
		if err != nil {
			if errors.Is(err, uploader.ErrNotFound) {
				continue
			}
			return nil, fmt.Errorf("verify locks: %w", err)
		}
		// The data object is written before the manifest, from the
		// backup's start: its lock is measured from the older time.
		at := e.Object.ModTime
		if !m.CreatedAt.IsZero() && m.CreatedAt.Before(at) {
			at = m.CreatedAt
		}
		r := p.Retention.For
		needs = append(needs,
			lockNeed{"backup", m.Object, at.Add(r), r},
			lockNeed{"manifest", mk, mi.ModTime.Add(r), r})
		if m.Kit != "" {
			kits[m.Kit] = maxTime(kits[m.Kit], at.Add(p.Retention.For))
		}
	}
	kr := kit.Repo{Store: b.Store, Cluster: b.Cluster}
	for _, id := range sortedKeys(kits) {
		km, err := kr.Manifest(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("verify locks: %w", err)
		}
		r := p.Retention.For
		needs = append(needs, lockNeed{"kit", km.Object, kits[id], r}, lockNeed{"kit manifest", kr.ManifestKey(id), kits[id], r})
	}
	ws, err := b.Windows(ctx, l)
	if err != nil {
		return nil, fmt.Errorf("verify locks: %w", err)
	}
	for _, w := range ws {
		if !w.Recoverable() {
			continue
		}
		stay := map[string]bool{}
		for _, o := range p.Stayers(w, now) {
			stay[o.Key] = true
		}
		period := func(key string) time.Duration {
			if stay[key] {
				return p.Retention.For
			}
			return p.For(key)
		}
		for _, s := range w.Segments {
			d := period(s.Object.Key)
			needs = append(needs, lockNeed{"segment", s.Object.Key, s.Object.ModTime.Add(d), d})
		}
		for _, m := range w.Markers {
			d := period(m.Object.Key)
			needs = append(needs, lockNeed{"marker", m.Object.Key, m.Object.ModTime.Add(d), d})
		}
	}
	return needs, nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
