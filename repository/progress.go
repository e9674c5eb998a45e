package repository

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Progress markers live under
//
//	<cluster>/progress/<generation>/<through>-<at>[.sealed].json
//
// with through (the durable captured-through revision) zero-padded to 20
// digits and at (Unix nanoseconds) to 19, so that a generation's markers
// sort by revision, then time. The name carries everything a listing
// needs; the body repeats it with the chain's head (for resuming).
//
// Objects are never replaced, so progress is a series of small immutable
// markers: the capture job writes one after each segment and one per
// interval while the cluster is idle, and deletes the ones a newer marker
// supersedes. A marker says: every revision up to Through is in stored
// segments, and at time At the cluster had no revision after Through.
// That is what lets the recovery point (and --to-time) advance while
// nothing is written, which no segment can say: revisions are dense, so
// a segment always holds at least one.
//
// A sealed marker ends its generation: nothing may be appended to it.

// ProgressFormat is the format version of a progress marker.
const ProgressFormat = 1

const atDigits = 19

// Progress is one progress marker of a generation.
type Progress struct {
	Format     int    `json:"format"`
	Generation string `json:"generation"`
	// ClusterID is etcd's cluster ID, in hex.
	ClusterID string `json:"cluster_id"`
	// SnapshotID and SnapshotRevision name the generation's anchor.
	SnapshotID       string `json:"snapshot_id"`
	SnapshotRevision int64  `json:"snapshot_revision"`
	// Through is the durable captured-through revision.
	Through int64 `json:"through"`
	// At is when the capture knew the cluster had no revision after
	// Through (a watch progress or the last event received).
	At time.Time `json:"at"`
	// LastSegment and LastHash are the key and the hex sha256 of the
	// segment holding Through ("" when Through is the snapshot's revision).
	LastSegment string `json:"last_segment,omitempty"`
	LastHash    string `json:"last_hash,omitempty"`
	// Token is the writer's fencing token.
	Token int64 `json:"token"`
	// Sealed ends the generation; SealReason says why (capture.GapReason).
	Sealed     bool   `json:"sealed,omitempty"`
	SealReason string `json:"seal_reason,omitempty"`
}

// ProgressInfo is a marker as named in a listing.
type ProgressInfo struct {
	Generation string
	Through    int64
	At         time.Time
	Sealed     bool
	Object     uploader.ObjectInfo
}

func (b *Repo) progressDir() string { return path.Join(b.Cluster, "progress") + "/" }

// ProgressKey returns the key of generation's marker for (through, at).
func (b *Repo) ProgressKey(generation string, through int64, at time.Time, sealed bool) string {
	return b.progressDir() + generation + "/" + progressName(through, at, sealed)
}

func progressName(through int64, at time.Time, sealed bool) string {
	s := fmt.Sprintf("%0*d-%0*d", revDigits, through, atDigits, at.UnixNano())
	if sealed {
		return s + ".sealed.json"
	}
	return s + ".json"
}

// ParseProgressName parses a marker's file name (without its directory).
func ParseProgressName(name string) (through int64, at time.Time, sealed bool, err error) {
	bad := func(why string) (int64, time.Time, bool, error) {
		return 0, time.Time{}, false, fmt.Errorf("progress marker name %q: %s (want <through>-<at>[.sealed].json)", name, why)
	}
	base, ok := strings.CutSuffix(name, ".json")
	if !ok {
		return bad("no .json suffix")
	}
	base, sealed = strings.CutSuffix(base, ".sealed")
	r, a, ok := strings.Cut(base, "-")
	if !ok || len(r) != revDigits || len(a) != atDigits || strings.HasPrefix(r, "+") || strings.HasPrefix(a, "+") {
		return bad("want a 20-digit revision and a 19-digit time")
	}
	through, err1 := strconv.ParseInt(r, 10, 64)
	ns, err2 := strconv.ParseInt(a, 10, 64)
	if err1 != nil || err2 != nil || through < 1 || ns < 0 {
		return bad("want a 20-digit revision and a 19-digit time")
	}
	return through, time.Unix(0, ns).UTC(), sealed, nil
}

// Validate checks a marker's fields.
func (p *Progress) Validate() error {
	bad := func(f string, a ...any) error { return fmt.Errorf("progress marker: "+f, a...) }
	switch {
	case p.Format != ProgressFormat:
		return bad("format %d, this lifeboat reads %d", p.Format, ProgressFormat)
	case validGeneration(p.Generation) != nil:
		return bad("%v", validGeneration(p.Generation))
	case p.SnapshotRevision < 1:
		return bad("snapshot revision %d", p.SnapshotRevision)
	case p.Through < p.SnapshotRevision:
		return bad("through %d before the snapshot's revision %d", p.Through, p.SnapshotRevision)
	case p.At.IsZero():
		return bad("no time")
	case p.Token == 0:
		return bad("no fencing token")
	case p.Sealed != (p.SealReason != ""):
		return bad("sealed %v with reason %q", p.Sealed, p.SealReason)
	case p.Through > p.SnapshotRevision && (p.LastSegment == "" || !isHexSHA256(p.LastHash)):
		return bad("through %d without the last segment and its hash", p.Through)
	}
	return nil
}

// PutProgress stores marker p (never replacing one) and returns its key.
func (b *Repo) PutProgress(ctx context.Context, p *Progress) (string, error) {
	if err := p.Validate(); err != nil {
		return "", fmt.Errorf("store progress: %w", err)
	}
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return "", fmt.Errorf("store progress: %w", err)
	}
	key := b.ProgressKey(p.Generation, p.Through, p.At, p.Sealed)
	data, err = b.sign(kindProgress, key, append(data, '\n'))
	if err != nil {
		return "", fmt.Errorf("store progress: %w", err)
	}
	if _, err := b.Store.Put(ctx, key, bytes.NewReader(data), b.Lock.MarkerOptions(p.Sealed)); err != nil {
		return "", fmt.Errorf("store progress %s: %w", key, err)
	}
	return key, nil
}

// ParseProgress parses and validates a progress marker's body.
func ParseProgress(data []byte) (*Progress, error) {
	var p Progress
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return &p, nil
}

// ReadProgress reads and parses a listed marker.
func (b *Repo) ReadProgress(ctx context.Context, pi ProgressInfo) (*Progress, error) {
	p, err := readDocument(ctx, b.Store, pi.Object.Key, "progress marker", func(data []byte) (*Progress, error) {
		if _, err := b.check(kindProgress, pi.Object.Key, data); err != nil {
			return nil, err
		}
		return ParseProgress(data)
	})
	if err != nil {
		return nil, err
	}
	if p.Generation != pi.Generation || p.Through != pi.Through || !p.At.Equal(pi.At) || p.Sealed != pi.Sealed {
		return nil, fmt.Errorf("read progress marker %s: its body says generation %s through %d at %s sealed %v, not what its name says",
			pi.Object.Key, p.Generation, p.Through, p.At.Format(time.RFC3339Nano), p.Sealed)
	}
	return p, nil
}

// ListProgress lists the progress markers of every generation, grouped
// by generation, each group in (through, at) order. Objects not named
// like a marker are returned as unnamed.
func (b *Repo) ListProgress(ctx context.Context) (byGen map[string][]ProgressInfo, unnamed []uploader.ObjectInfo, err error) {
	dir := b.progressDir()
	byGen = map[string][]ProgressInfo{}
	err = b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		gen, name, ok := strings.Cut(strings.TrimPrefix(o.Key, dir), "/")
		if !ok || validGeneration(gen) != nil || strings.Contains(name, "/") {
			unnamed = append(unnamed, o)
			return nil
		}
		through, at, sealed, err := ParseProgressName(name)
		if err != nil {
			unnamed = append(unnamed, o)
			return nil
		}
		byGen[gen] = append(byGen[gen], ProgressInfo{Generation: gen, Through: through, At: at, Sealed: sealed, Object: o})
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list progress markers in %s: %w", b.Store, err)
	}
	return byGen, unnamed, nil
}
