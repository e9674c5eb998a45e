package inspect

import (
	"fmt"
)

// Change is one key that differs between two snapshots.
type Change struct {
	// Op is "added" (only in the second), "deleted" (only in the first) or
	// "changed" (a different value: size or 64-bit xxHash differ).
	Op   string
	Key  string
	A, B *Entry // nil on the side where the key is absent
}

// Diff calls fn with each key under prefix whose value differs between a
// and b, in key order, reading the two indexes only.
func Diff(a, b *Snapshot, prefix string, fn func(Change) error) error {
	na, err := a.ix.iter(prefix)
	if err != nil {
		return fmt.Errorf("backup %s: list %q: %w", a.ID, prefix, err)
	}
	nb, err := b.ix.iter(prefix)
	if err != nil {
		return fmt.Errorf("backup %s: list %q: %w", b.ID, prefix, err)
	}
	next := func(n func() (*Entry, error), s *Snapshot) (*Entry, error) {
		e, err := n()
		if err != nil {
			return nil, fmt.Errorf("backup %s: list %q: %w", s.ID, prefix, err)
		}
		if e == nil {
			return nil, nil
		}
		c := *e
		return &c, nil
	}
	ea, err := next(na, a)
	if err != nil {
		return err
	}
	eb, err := next(nb, b)
	if err != nil {
		return err
	}
	for ea != nil || eb != nil {
		var c *Change
		switch {
		case eb == nil || ea != nil && ea.Key < eb.Key:
			c = &Change{Op: "deleted", Key: ea.Key, A: ea}
			ea, err = next(na, a)
		case ea == nil || eb.Key < ea.Key:
			c = &Change{Op: "added", Key: eb.Key, B: eb}
			eb, err = next(nb, b)
		default:
			if ea.Size != eb.Size || ea.CRC != eb.CRC {
				c = &Change{Op: "changed", Key: ea.Key, A: ea, B: eb}
			}
			ea, err = next(na, a)
			if err == nil {
				eb, err = next(nb, b)
			}
		}
		if err != nil {
			return err
		}
		if c != nil {
			if err := fn(*c); err != nil {
				return err
			}
		}
	}
	return nil
}
