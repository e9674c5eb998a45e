package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// The scrub's state (package scrub) is what it must remember across
// runs, in the store it scrubs, since the agent that scrubs may move:
//
//	<cluster>/scrub/<time>.json
//
// <time> is when the run ended (UTC, millisecond, fixed width: names sort
// by time). Each run writes a new immutable document, conditionally, and
// then deletes the older ones but the newest few (ScrubStateKeep). They
// are not locked by Object Lock (a restore never needs them). A Repo with
// a Signer signs them like a manifest; with trusted keys a reader takes
// none that is not signed by one (an untrusted state is refused: the scrub
// then starts its rotation afresh, reading more, never less). Copies are
// whole stores with their own scrub state: replica does not copy it.

// ScrubStateFormat is the scrub state format this build writes and reads.
const ScrubStateFormat = 1

// ScrubStateKeep is how many scrub states a run leaves in the store.
const ScrubStateKeep = 3

// kindScrubState is what a scrub state's signature says it is.
const kindScrubState = "scrub state"

// ErrBadScrubState is wrapped by scrub state decoding errors.
var ErrBadScrubState = errors.New("bad scrub state")

// ScrubState is one scrub run's record: when it ran and when each object
// it knows was last read in full.
type ScrubState struct {
	Format  int       `json:"format"`
	Cluster string    `json:"cluster"`
	At      time.Time `json:"at"`
	// Objects checked, bytes read in full, objects damaged and objects
	// not checked by this run.
	Objects    int   `json:"objects"`
	BytesRead  int64 `json:"bytes_read"`
	Damaged    int   `json:"damaged"`
	NotChecked int   `json:"not_checked"`
	// Read holds, for each object still stored, when it was last read in
	// full and proven good, and when it was first seen (for one never read).
	Read map[string]ScrubMark `json:"read"`
}

// ScrubMark is what the scrub remembers of one object.
type ScrubMark struct {
	// Size is the object's size when last seen: a mark of an object whose
	// size changed is void.
	Size int64 `json:"size"`
	// ReadAt is when it was last read in full and found good (zero:
	// never); SeenAt when it was first seen.
	ReadAt time.Time `json:"read_at,omitzero"`
	SeenAt time.Time `json:"seen_at"`
}

// ParseScrubState decodes and validates a scrub state.
func ParseScrubState(data []byte) (*ScrubState, error) {
	var s ScrubState
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadScrubState, err)
	}
	switch {
	case s.Format != ScrubStateFormat:
		return nil, fmt.Errorf("%w: format %d, this build reads format %d", ErrBadScrubState, s.Format, ScrubStateFormat)
	case s.At.IsZero():
		return nil, fmt.Errorf("%w: no time", ErrBadScrubState)
	}
	for k, m := range s.Read {
		if k == "" || m.Size < 0 || m.SeenAt.IsZero() {
			return nil, fmt.Errorf("%w: bad mark of %q", ErrBadScrubState, k)
		}
	}
	return &s, nil
}

func (b *Repo) scrubDir() string { return path.Join(b.Cluster, "scrub") + "/" }

// ScrubStateKey returns the key of the scrub state written at t.
func (b *Repo) ScrubStateKey(t time.Time) string {
	return b.scrubDir() + t.UTC().Format(drillTimeFormat) + ".json"
}

// PutScrubState stores s (signed with the Repo's Signer) and deletes the
// older states but the newest ScrubStateKeep; a failed delete is
// returned, after the new state is stored.
func (b *Repo) PutScrubState(ctx context.Context, s *ScrubState) error {
	s.Format, s.Cluster = ScrubStateFormat, b.Cluster
	data, err := json.Marshal(s)
	if err != nil {
		return err
	}
	key := b.ScrubStateKey(s.At)
	if data, err = b.sign(kindScrubState, key, append(data, '\n')); err != nil {
		return err
	}
	if _, err := b.Store.Put(ctx, key, bytes.NewReader(data), uploader.PutOptions{ContentType: "application/json"}); err != nil {
		return fmt.Errorf("write scrub state %s: %w", key, err)
	}
	keys, err := b.scrubStateKeys(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for i := 0; i < len(keys)-ScrubStateKeep; i++ {
		if err := b.Store.Delete(ctx, keys[i]); err != nil {
			errs = append(errs, fmt.Errorf("delete old scrub state: %w", err))
		}
	}
	return errors.Join(errs...)
}

// scrubStateKeys lists the scrub states, oldest first.
func (b *Repo) scrubStateKeys(ctx context.Context) ([]string, error) {
	var keys []string
	err := b.Store.List(ctx, b.scrubDir(), func(o uploader.ObjectInfo) error {
		if strings.HasSuffix(o.Key, ".json") && !strings.Contains(strings.TrimPrefix(o.Key, b.scrubDir()), "/") {
			keys = append(keys, o.Key)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list scrub states: %w", err)
	}
	return keys, nil
}

// LatestScrubState reads the newest scrub state; nil (and no error) when
// there is none. A state that does not parse or is untrusted is an error
// wrapping ErrBadScrubState or ErrUntrusted: the caller decides whether to
// start afresh. A store error is returned as it is.
func (b *Repo) LatestScrubState(ctx context.Context) (*ScrubState, error) {
	keys, err := b.scrubStateKeys(ctx)
	if err != nil || len(keys) == 0 {
		return nil, err
	}
	key := keys[len(keys)-1]
	return readDocument(ctx, b.Store, key, "scrub state", func(data []byte) (*ScrubState, error) {
		if _, err := b.check(kindScrubState, key, data); err != nil {
			return nil, err
		}
		return ParseScrubState(data)
	})
}

// ReadDocumentAt reads the signed document at key afresh (never from the
// cache) and checks it as the reader of its kind does: a manifest, a drill
// report or a progress marker, told apart by the key's area. An untrusted
// document is an *UntrustedError. Errors do not tell a store's failure
// from bad bytes: a caller that must (the scrub) watches the store's
// reads itself.
func (b *Repo) ReadDocumentAt(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, b.dir()) && strings.HasSuffix(key, ".json"):
		m, err := b.readManifest(ctx, key)
		if err != nil {
			return err
		}
		if u := m.Untrusted(); u != nil {
			return u
		}
		if want := b.ManifestKey(m.ID); want != key {
			return fmt.Errorf("manifest %s: %w: it holds backup %s", key, ErrBadManifest, m.ID)
		}
		return nil
	case strings.HasPrefix(key, b.drillDir()):
		_, err := b.readDrillReport(ctx, key)
		return err
	case strings.HasPrefix(key, b.progressDir()):
		gen, name, ok := strings.Cut(strings.TrimPrefix(key, b.progressDir()), "/")
		if !ok {
			return fmt.Errorf("progress marker %s: not under a generation", key)
		}
		through, at, sealed, err := ParseProgressName(name)
		if err != nil {
			return fmt.Errorf("progress marker %s: %w", key, err)
		}
		_, err = b.ReadProgress(ctx, ProgressInfo{Generation: gen, Through: through, At: at, Sealed: sealed, Object: uploader.ObjectInfo{Key: key}})
		return err
	}
	return fmt.Errorf("%s is not a manifest, drill report or progress marker of cluster %s", key, b.Cluster)
}
