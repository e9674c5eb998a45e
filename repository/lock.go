package repository

import (
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// LockPolicy is the Object Lock a Repo's writer requests on everything it
// stores, so that every object a restore of a retained backup or window
// reads is locked for as long as it is needed:
//
//   - data objects (the backup job, from the same retention), manifests,
//     drill reports, sealed progress markers and change segments of the
//     highest compaction level, for Retention.For from when they are
//     written;
//   - progress markers that a newer one will supersede (capture writes
//     one per segment and per idle interval, and deletes the older ones)
//     like level-0 segments, MarkerFor; the newest marker of a window,
//     once it stays the newest past that (the capture stopped), is
//     extended like a segment that stays;
//   - change segments that compaction will replace (level 0 and every
//     compacted level below the highest), for SegmentFor(level): until
//     their bucket of the next level closes and the compactor's next
//     pass, plus the compaction grace and a margin (LockMargin). A segment that
//     compaction leaves on the path after that (alone in its bucket, or
//     compaction fell behind) has its retention extended to
//     Retention.For by whoever tends the window (ExtendStayers: the
//     compactor, a copy run).
//
// Kits take Retention too (kit.Repo.Lock). The zero LockPolicy locks
// nothing. A manifest's lock fields record what the primary's writer
// requested; the actual lock of an object (a copy's, a bucket default's)
// is what the store's Stat says, and readers that must know it ask there.
type LockPolicy struct {
	// Retention is the mode, the retain period and the legal hold of
	// everything but the segments compaction replaces (store.object_lock).
	Retention uploader.Retention
	// Compaction is the compaction that replaces segments of its lower
	// levels; without levels (no compaction runs) every segment takes
	// Retention.For.
	Compaction CompactPolicy
	// Margin is added to the short locks (LockMargin when zero).
	Margin time.Duration
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// LockMargin is added to the lock of a segment compaction replaces beyond
// the time compaction needs to replace and delete it: a pass late by a
// tick or two, a store clock a little ahead.
const LockMargin = 5 * time.Minute

// Enabled reports whether p locks anything.
func (p LockPolicy) Enabled() bool { return p.Retention.Enabled() }

func (p LockPolicy) margin() time.Duration {
	if p.Margin > 0 {
		return p.Margin
	}
	return LockMargin
}

func (p LockPolicy) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// replaced reports whether segments of level are replaced by compaction,
// and when a segment of that level is due to be, from when it was
// written: its next level's span, plus Settle and one pass of the
// compactor (a third of the shortest span).
func (p LockPolicy) replaced(level int) (time.Duration, bool) {
	c := p.Compaction.WithDefaults()
	if level >= len(c.Levels) {
		return 0, false
	}
	return c.Levels[level] + c.Settle + c.Levels[0]/3, true
}

// Options are the PutOptions of an object locked for Retention.For from
// now (a manifest, a drill report, a marker).
func (p LockPolicy) Options(contentType string) uploader.PutOptions {
	return p.Retention.Options(p.now(), contentType)
}

// SegmentFor is how long a change segment of level is locked from when
// it is written: until compaction has replaced it and its grace has
// passed, plus LockMargin, for the levels compaction replaces;
// Retention.For for the highest level, or for all without compaction.
func (p LockPolicy) SegmentFor(level int) time.Duration {
	due, ok := p.replaced(level)
	if !ok {
		return p.Retention.For
	}
	return due + p.Compaction.WithDefaults().Grace + p.margin()
}

// SegmentOptions are the PutOptions of a change segment of level written
// now. Segments compaction replaces get no legal hold: a hold has no end,
// and compaction could never delete them.
func (p LockPolicy) SegmentOptions(level int) uploader.PutOptions {
	r := p.Retention
	if _, ok := p.replaced(level); ok {
		r.For, r.LegalHold = p.SegmentFor(level), false
	}
	return r.Options(p.now(), "application/octet-stream")
}

// MarkerFor is how long an unsealed progress marker is locked: like a
// level-0 segment (a newer marker supersedes it within the capture
// interval), Retention.For without compaction (nothing would extend the
// newest one).
func (p LockPolicy) MarkerFor() time.Duration { return p.SegmentFor(0) }

// MarkerOptions are the PutOptions of a progress marker written now.
func (p LockPolicy) MarkerOptions(sealed bool) uploader.PutOptions {
	if sealed {
		return p.Options("application/json")
	}
	o := p.SegmentOptions(0)
	o.ContentType = "application/json"
	return o
}

// OptionsFor are the PutOptions of the object at key written now, by
// its kind (For): what a copy run writes, object for object.
func (p LockPolicy) OptionsFor(key, contentType string) uploader.PutOptions {
	r := p.Retention
	if d := p.For(key); d != r.For {
		r.For, r.LegalHold = d, false
	}
	return r.Options(p.now(), contentType)
}

// For is how long the object at key (relative to the store's root) is to
// be locked from when it was written: SegmentFor its level for a change
// segment, Retention.For for anything else.
func (p LockPolicy) For(key string) time.Duration {
	switch path.Base(path.Dir(path.Dir(key))) {
	case "changes":
		if si, err := parseSegmentName(path.Base(key)); err == nil {
			return p.SegmentFor(si.Level)
		}
	case "progress":
		if _, _, sealed, err := ParseProgressName(path.Base(key)); err == nil && !sealed {
			return p.MarkerFor()
		}
	}
	return p.Retention.For
}

// Stayers returns the objects of w a restore needs whose short lock
// (SegmentFor, MarkerFor) is no longer enough: the segments on w's path
// that compaction was due to replace half the margin ago or more (alone in
// their bucket, the last of a sealed window, or compaction fell behind),
// and the window's newest marker when as old (the capture stopped). Their
// lock is to be extended to Retention.For from when they were written
// (ExtendStayers).
func (p LockPolicy) Stayers(w Window, now time.Time) []uploader.ObjectInfo {
	if p.Retention.Mode == "" {
		return nil
	}
	var out []uploader.ObjectInfo
	for _, s := range w.Segments {
		if due, ok := p.replaced(s.Level); ok && now.Sub(s.Object.ModTime) >= due+p.margin()/2 {
			out = append(out, s.Object)
		}
	}
	if n := len(w.Markers); n > 0 && !w.Markers[n-1].Sealed {
		m := w.Markers[n-1].Object
		if due, ok := p.replaced(0); ok && now.Sub(m.ModTime) >= due+p.margin()/2 {
			out = append(out, m)
		}
	}
	return out
}

// ExtendLock makes the lock on key in st last at least until until in
// p's mode, when p locks and st can extend (RetentionExtender); otherwise
// it does nothing.
func ExtendLock(ctx context.Context, st uploader.Store, p LockPolicy, key string, until time.Time) error {
	x, ok := st.(RetentionExtender)
	if !ok || p.Retention.Mode == "" {
		return nil
	}
	return x.ExtendRetention(ctx, key, p.Retention.Mode, until)
}

// RetentionExtender is a store whose objects' Object Lock retention can
// be extended after they are written (uploader.S3). A store without it
// (uploader.Dir) has no locks to extend.
type RetentionExtender interface {
	ExtendRetention(ctx context.Context, key, mode string, until time.Time) error
}

// ExtendStayers extends the lock of w's Stayers to Retention.For from
// when each was written, when the store can (RetentionExtender); done,
// when not nil, remembers the keys already extended so that a pass that
// runs every few seconds asks the store once per segment. It returns how
// many segments it extended.
func (b *Repo) ExtendStayers(ctx context.Context, w Window, done map[string]bool) (int, error) {
	x, ok := b.Store.(RetentionExtender)
	if !ok {
		return 0, nil
	}
	n := 0
	for _, o := range b.Lock.Stayers(w, b.Lock.now()) {
		if done[o.Key] {
			continue
		}
		until := b.Lock.Retention.Until(o.ModTime)
		if err := x.ExtendRetention(ctx, o.Key, b.Lock.Retention.Mode, until); err != nil && !errors.Is(err, uploader.ErrNotFound) {
			return n, fmt.Errorf("extend the lock of %s, which stays in its window: %w", o.Key, err)
		}
		if done != nil {
			done[o.Key] = true
		}
		n++
	}
	return n, nil
}

// LockedNow reports whether the store still locks the object at key at
// now (retention or legal hold, by its Stat: what the store enforces, not
// what a manifest claims). A missing object is not locked.
func LockedNow(ctx context.Context, st uploader.Store, key string, now time.Time) (bool, error) {
	info, err := st.Stat(ctx, key)
	switch {
	case errors.Is(err, uploader.ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("check the lock of %s: %w", key, err)
	}
	return info.Locked(now), nil
}
