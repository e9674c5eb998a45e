package repository

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/uploader"
)

// Change segments live under
//
//	<cluster>/changes/<generation>/<first>-<last>.seg[.zst][.age]
//
// with first and last zero-padded to 20 digits, so that a generation's
// segments sort by revision in a listing.

// revDigits is the width of a revision in a segment's name.
const revDigits = 20

func (b *Repo) changesDir() string { return path.Join(b.Cluster, "changes") + "/" }

// SegmentKey returns the key of generation's segment first-last stored
// with e.
func (b *Repo) SegmentKey(generation string, first, last int64, e Encoding) string {
	return b.changesDir() + generation + "/" + SegmentName(first, last, e)
}

// SegmentName returns a segment's file name, e.g.
// 00000000000000000101-00000000000000000200.seg.zst.age.
func SegmentName(first, last int64, e Encoding) string {
	return segmentName(first, last, 0, time.Time{}, e)
}

// CompactedKey returns the key of a compacted segment of generation:
// its revisions, level and bucket time are in the name, e.g.
// 00000000000000000101-00000000000000000200.L1-20261201T100000Z.seg.zst,
// so that compaction and listings read a generation's shape from names.
func (b *Repo) CompactedKey(generation string, first, last int64, level int, bucket time.Time, e Encoding) string {
	return b.changesDir() + generation + "/" + segmentName(first, last, level, bucket, e)
}

// bucketLayout formats a compacted segment's bucket time in its name.
const bucketLayout = "20060102T150405Z"

func segmentName(first, last int64, level int, bucket time.Time, e Encoding) string {
	s := fmt.Sprintf("%0*d-%0*d", revDigits, first, revDigits, last)
	if level > 0 {
		s += fmt.Sprintf(".L%d-%s", level, bucket.UTC().Format(bucketLayout))
	}
	s += ".seg"
	if e.compress() {
		s += ".zst"
	}
	if len(e.Recipients) > 0 {
		s += ".age"
	}
	return s
}

// SegmentInfo is a segment as named in a listing.
type SegmentInfo struct {
	Generation  string
	First, Last int64
	// Level is 0 for a segment as capture wrote it, n >= 1 for a
	// compacted one; Bucket is a compacted segment's bucket time.
	Level  int
	Bucket time.Time
	// Compression ("zstd"/"none") and Encryption ("age"/"none") as the
	// name's suffix says.
	Compression, Encryption string
	Object                  uploader.ObjectInfo
}

// ParseSegmentName parses a segment's file name (without its directory),
// compacted or not.
func ParseSegmentName(name string) (first, last int64, compression, encryption string, err error) {
	si, err := parseSegmentName(name)
	return si.First, si.Last, si.Compression, si.Encryption, err
}

// parseSegmentName parses a segment's file name into a SegmentInfo
// without its generation and object.
func parseSegmentName(name string) (si SegmentInfo, err error) {
	bad := func(why string) (SegmentInfo, error) {
		return SegmentInfo{}, fmt.Errorf("segment name %q: %s (want <first>-<last>[.L<level>-<bucket>].seg[.zst][.age])", name, why)
	}
	base, rest, ok := strings.Cut(name, ".")
	if !ok {
		return bad("no suffix")
	}
	if lv, r, ok := strings.Cut(rest, "."); ok && strings.HasPrefix(lv, "L") {
		l, b, ok := strings.Cut(lv[1:], "-")
		n, err := strconv.Atoi(l)
		if !ok || err != nil || n < 1 || n > maxLevel || l != strconv.Itoa(n) {
			return bad("bad level")
		}
		t, err := time.Parse(bucketLayout, b)
		if err != nil {
			return bad("bad bucket time")
		}
		si.Level, si.Bucket, rest = n, t, r
	}
	var compression, encryption string
	switch rest {
	case "seg":
		compression, encryption = "none", "none"
	case "seg.zst":
		compression, encryption = "zstd", "none"
	case "seg.age":
		compression, encryption = "none", "age"
	case "seg.zst.age":
		compression, encryption = "zstd", "age"
	default:
		return bad("unknown suffix")
	}
	f, l, ok := strings.Cut(base, "-")
	if !ok || len(f) != revDigits || len(l) != revDigits {
		return bad("revisions must be two 20-digit numbers")
	}
	first, err1 := strconv.ParseInt(f, 10, 64)
	last, err2 := strconv.ParseInt(l, 10, 64)
	if err1 != nil || err2 != nil || strings.HasPrefix(f, "+") || strings.HasPrefix(l, "+") {
		return bad("revisions must be two 20-digit numbers")
	}
	if first < 1 || first > last {
		return bad("want 1 <= first <= last")
	}
	si.First, si.Last, si.Compression, si.Encryption = first, last, compression, encryption
	return si, nil
}

// validGeneration checks a generation id: one path segment.
func validGeneration(g string) error {
	if g == "" || len(g) > 200 || g == "." || g == ".." || strings.ContainsAny(g, "/\\\x00") {
		return fmt.Errorf("generation %q: want a non-empty name without slashes", g)
	}
	return nil
}

func isHexSHA256(s string) bool {
	b, err := hex.DecodeString(s)
	return err == nil && len(b) == sha256.Size && strings.ToLower(s) == s
}

// PutSegment stores s encoded with e under its key, never overwriting: a
// segment already there (another writer's) fails with an error wrapping
// uploader.ErrExists. It returns the object and the hex sha256 of the
// stored bytes, the next segment's PrevHash; when the put fails, still
// the hash of the bytes it tried to store (a put may have landed with
// its reply lost: the writer tells its own object by that hash). A Repo
// with a Signer signs the segment for its key (format 3).
func (b *Repo) PutSegment(ctx context.Context, s *Segment, e Encoding) (uploader.ObjectInfo, string, error) {
	if err := validGeneration(s.Generation); err != nil {
		return uploader.ObjectInfo{}, "", fmt.Errorf("store segment: %w", err)
	}
	key := b.SegmentKey(s.Generation, s.First, s.Last, e)
	data, err := encodeStoredSegment(s, e, b.segmentSigner(key))
	if err != nil {
		return uploader.ObjectInfo{}, "", fmt.Errorf("store segment %s: %w", key, err)
	}
	sum := sha256.Sum256(data)
	o, err := b.Store.Put(ctx, key, bytes.NewReader(data), b.Lock.SegmentOptions(s.Level))
	if err != nil {
		return uploader.ObjectInfo{}, hex.EncodeToString(sum[:]), fmt.Errorf("store segment %s: %w", key, err)
	}
	return o, hex.EncodeToString(sum[:]), nil
}

// ListSegments lists generation's segments in revision order (by First,
// then Last). Objects under the generation that are not named like a
// segment are returned as unnamed, never dropped silently.
func (b *Repo) ListSegments(ctx context.Context, generation string) (segs []SegmentInfo, unnamed []uploader.ObjectInfo, err error) {
	if err := validGeneration(generation); err != nil {
		return nil, nil, fmt.Errorf("list segments: %w", err)
	}
	dir := b.changesDir() + generation + "/"
	err = b.Store.List(ctx, dir, func(o uploader.ObjectInfo) error {
		si, err := parseSegmentName(strings.TrimPrefix(o.Key, dir))
		if err != nil {
			unnamed = append(unnamed, o)
			return nil
		}
		si.Generation, si.Object = generation, o
		segs = append(segs, si)
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list segments of generation %s: %w", generation, err)
	}
	// Zero-padded names sort by First then Last already; the listing is
	// in lexical order by the Store's contract.
	return segs, unnamed, nil
}

// ReadSegment reads and parses a listed segment, returning it with the
// hex sha256 of its stored bytes. A damaged object wraps ErrBadSegment.
// With the Repo's Trust enabled, a segment that is not signed by a
// trusted key for its key (unsigned unless AllowUnsigned, an unknown key,
// altered or moved after signing) is an *UntrustedError naming it.
//
// Damage (ErrBadSegment, a bad signature) is a *DamageError naming the
// object (damage.go).
func (b *Repo) ReadSegment(ctx context.Context, si SegmentInfo, ids []age.Identity) (*Segment, string, error) {
	s, h, err := b.readSegment(ctx, si, ids)
	return s, h, damaged(si.Object.Key, err)
}

func (b *Repo) readSegment(ctx context.Context, si SegmentInfo, ids []age.Identity) (*Segment, string, error) {
	data, err := b.readStoredSegment(ctx, si)
	if err != nil {
		return nil, "", err
	}
	s, err := b.parseStored(si, data, ids)
	if err != nil {
		return nil, "", err
	}
	return s, storedHash(data), nil
}

// parseStored decodes and parses a listed segment's stored bytes and
// checks its signature (with Trust) and its name.
func (b *Repo) parseStored(si SegmentInfo, data []byte, ids []age.Identity) (*Segment, error) {
	ss, err := decodeStoredSealed(bytes.NewReader(data), si.Compression, si.Encryption, ids)
	if err != nil {
		return nil, fmt.Errorf("read segment %s: %w", si.Object.Key, err)
	}
	if err := b.checkSegment(si.Object.Key, ss.seal); err != nil {
		return nil, err
	}
	if err := checkListed(si, &ss.seg.SegmentHeader); err != nil {
		return nil, err
	}
	return ss.seg, nil
}

// CheckSegmentBytes checks the stored bytes of listed segment si, read
// by someone else (a copy reads them to write them elsewhere), as
// ReadSegment checks what it reads: decoded, parsed whole (its sha256
// trailer), its signature (with Trust) and its name. Damage is a
// *DamageError naming the segment; an encrypted segment with no ids
// gives ErrNoIdentity (not checked).
func (b *Repo) CheckSegmentBytes(si SegmentInfo, data []byte, ids []age.Identity) error {
	_, err := b.parseStored(si, data, ids)
	return damaged(si.Object.Key, err)
}

// ReadSegmentRaw reads a listed segment and decodes it (decrypts,
// decompresses) to its raw form without parsing it: it returns the raw
// bytes (for ParseSegment), the header (ParseSegmentHeader) and the hex
// sha256 of its stored bytes. The records and the raw form's own sha256
// are left to the reader of the bytes: damage there is found by
// ParseSegment, ErrBadSegment as in ReadSegment. A damaged object or
// header wraps ErrBadSegment.
//
// With the Repo's Trust enabled, the signature at the raw form's end is
// checked over the sha256 before it, as ReadSegment does (an
// *UntrustedError naming the segment): what ParseSegment then accepts
// (its content matching that sha256) is what a trusted key signed. The
// raw form is not hashed here: the replay's parse does it once.
func (b *Repo) ReadSegmentRaw(ctx context.Context, si SegmentInfo, ids []age.Identity) ([]byte, SegmentHeader, string, error) {
	return b.ReadSegmentRawInto(ctx, si, ids, nil)
}

// ReadSegmentRawInto is ReadSegmentRaw decoding into buf's memory (from
// its start, growing it as needed), for a reader that recycles its
// buffers. Damage is a *DamageError naming the object, as in ReadSegment.
func (b *Repo) ReadSegmentRawInto(ctx context.Context, si SegmentInfo, ids []age.Identity, buf []byte) ([]byte, SegmentHeader, string, error) {
	raw, h, sum, err := b.readSegmentRawInto(ctx, si, ids, buf)
	return raw, h, sum, damaged(si.Object.Key, err)
}

func (b *Repo) readSegmentRawInto(ctx context.Context, si SegmentInfo, ids []age.Identity, buf []byte) ([]byte, SegmentHeader, string, error) {
	data, err := b.readStoredSegment(ctx, si)
	if err != nil {
		return nil, SegmentHeader{}, "", err
	}
	raw, err := decodeStored(bytes.NewReader(data), si.Compression, si.Encryption, ids, func(r io.Reader) ([]byte, error) { return readAllInto(r, buf[:0]) })
	var hd SegmentHeader
	if err == nil {
		var signed bool
		if hd, signed, err = parseSegmentHeader(bytes.NewReader(raw)); err == nil && b.Trust.Enabled() {
			var seal segmentSeal
			if seal, err = rawSeal(raw, signed); err == nil {
				if err := b.checkSegment(si.Object.Key, seal); err != nil {
					return nil, SegmentHeader{}, "", err
				}
			}
		}
	}
	if err != nil {
		return nil, SegmentHeader{}, "", fmt.Errorf("read segment %s: %w", si.Object.Key, err)
	}
	if err := checkListed(si, &hd); err != nil {
		return nil, SegmentHeader{}, "", err
	}
	return raw, hd, storedHash(data), nil
}

// readStoredSegment reads a segment's stored bytes whole: a segment is
// bounded by the writer's size bound, and its hash covers exactly the
// stored bytes.
func (b *Repo) readStoredSegment(ctx context.Context, si SegmentInfo) ([]byte, error) {
	rc, err := b.Store.Get(ctx, si.Object.Key)
	if err != nil {
		return nil, fmt.Errorf("read segment %s: %w", si.Object.Key, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("read segment %s: %w", si.Object.Key, err)
	}
	return data, nil
}

// checkListed checks that a segment holds what its listing names.
func checkListed(si SegmentInfo, h *SegmentHeader) error {
	if h.Generation != si.Generation || h.First != si.First || h.Last != si.Last || h.Level != si.Level || !h.Bucket.Equal(si.Bucket) {
		return fmt.Errorf("read segment %s: %w: it holds generation %s revisions %d-%d at level %d", si.Object.Key, ErrBadSegment, h.Generation, h.First, h.Last, h.Level)
	}
	return nil
}

func storedHash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// ChainLink is one stored segment of a chain: its header, its key and the
// hex sha256 of its stored bytes.
type ChainLink struct {
	Key    string
	Header SegmentHeader
	Hash   string
}

// ChainHash is what the next segment of the chain names as its PrevHash:
// the stored bytes' sha256 of a segment as capture wrote it, the end hash
// of a compacted one (the chain hash of the last segment it replaced), so
// that compaction never changes the links around what it merges.
func (l ChainLink) ChainHash() string {
	if l.Header.EndHash != "" {
		return l.Header.EndHash
	}
	return l.Hash
}

// ChainProblem says how a chain is broken.
type ChainProblem string

// The problems CheckChain reports.
const (
	ChainEmpty    ChainProblem = "empty"        // no segment
	ChainNoStart  ChainProblem = "no start"     // the first segment does not start at the snapshot
	ChainGap      ChainProblem = "gap"          // revisions missing between two segments
	ChainOverlap  ChainProblem = "overlap"      // two segments of one writer hold the same revisions
	ChainFork     ChainProblem = "fork"         // two writers (tokens) hold the same revisions or follow the same segment
	ChainBadHash  ChainProblem = "bad hash"     // a segment's PrevHash is not its predecessor's hash
	ChainMismatch ChainProblem = "mismatch"     // cluster ID, generation or format differ
	ChainStale    ChainProblem = "stale writer" // a fencing token lower than its predecessor's
)

// ChainError is a broken chain: what and where, with revisions.
type ChainError struct {
	Problem ChainProblem
	// Key is the segment where the chain breaks, Prev its predecessor's
	// key (empty for ChainEmpty and ChainNoStart).
	Key, Prev string
	// From and To bound the revisions concerned: missing (ChainGap) or
	// held twice (ChainOverlap, ChainFork).
	From, To int64
	Detail   string
}

func (e *ChainError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "change chain: %s", e.Problem)
	if e.From != 0 || e.To != 0 {
		fmt.Fprintf(&b, " at revisions %d-%d", e.From, e.To)
	}
	if e.Prev != "" {
		fmt.Fprintf(&b, " between %s and %s", e.Prev, e.Key)
	} else if e.Key != "" {
		fmt.Fprintf(&b, " at %s", e.Key)
	}
	if e.Detail != "" {
		b.WriteString(": " + e.Detail)
	}
	b.WriteString(" (the generation is broken there: restore only up to the revision before it)")
	return b.String()
}

// CheckChain verifies a generation's segments, in revision order (as
// ListSegments returns them), as one unbroken chain:
//   - the first segment names the snapshot and starts at its revision + 1
//     (Validate guarantees First = SnapshotRevision+1);
//   - every other segment starts at its predecessor's CapturedThrough+1:
//     earlier is an overlap (ChainOverlap with the same token, ChainFork
//     with another), later is a ChainGap;
//   - its PrevHash is its predecessor's stored hash (ChainBadHash), and
//     no two segments name the same predecessor (ChainFork);
//   - fencing tokens never decrease (ChainStale): a writer that lost the
//     lock cannot continue after its successor;
//   - cluster ID, generation and format are the same throughout.
//
// It returns the first break as a *ChainError, never merges or skips. A
// nil error means [snapshot revision, last CapturedThrough] is recoverable.
func CheckChain(links []ChainLink) error {
	if len(links) == 0 {
		return &ChainError{Problem: ChainEmpty, Detail: "no change segments"}
	}
	first := links[0]
	if first.Header.SnapshotID == "" {
		return &ChainError{Problem: ChainNoStart, Key: first.Key, From: first.Header.First, To: first.Header.Last,
			Detail: "the first segment follows another segment, not a snapshot: the generation's start is missing"}
	}
	byPrev := map[string]string{}
	for i := 1; i < len(links); i++ {
		prev, cur := links[i-1], links[i]
		err := CheckLink(prev, cur)
		var ce *ChainError
		if err != nil && (!errors.As(err, &ce) || ce.Problem != ChainBadHash) {
			return err
		}
		if other, ok := byPrev[cur.Header.PrevHash]; ok {
			return &ChainError{Problem: ChainFork, Key: cur.Key, Prev: other, From: cur.Header.First, To: cur.Header.Last, Detail: "both follow the same segment"}
		}
		if err != nil {
			return err
		}
		byPrev[cur.Header.PrevHash] = cur.Key
	}
	return nil
}

// CheckLink checks that cur continues prev, by CheckChain's rules for two
// neighbours: same cluster, generation and format, cur starts right
// after prev's captured-through revision, names no snapshot and names
// prev's hash, and its fencing token is not lower. A replay that starts
// inside a generation checks its segments pairwise with it as it reads
// them (restore.Replay), instead of the chain from the generation's start.
func CheckLink(prev, cur ChainLink) error {
	p, c := prev.Header, cur.Header
	switch {
	case c.ClusterID != p.ClusterID:
		return &ChainError{Problem: ChainMismatch, Key: cur.Key, Prev: prev.Key, Detail: fmt.Sprintf("cluster ID %x after %x", c.ClusterID, p.ClusterID)}
	case c.Generation != p.Generation:
		return &ChainError{Problem: ChainMismatch, Key: cur.Key, Prev: prev.Key, Detail: fmt.Sprintf("generation %s after %s", c.Generation, p.Generation)}
	}
	if c.First <= p.CapturedThrough {
		pr := ChainOverlap
		if c.Token != p.Token {
			pr = ChainFork
		}
		return &ChainError{Problem: pr, Key: cur.Key, Prev: prev.Key, From: c.First, To: min(c.CapturedThrough, p.CapturedThrough),
			Detail: fmt.Sprintf("tokens %d and %d", p.Token, c.Token)}
	}
	if c.First > p.CapturedThrough+1 {
		return &ChainError{Problem: ChainGap, Key: cur.Key, Prev: prev.Key, From: p.CapturedThrough + 1, To: c.First - 1}
	}
	if c.SnapshotID != "" {
		return &ChainError{Problem: ChainMismatch, Key: cur.Key, Prev: prev.Key, Detail: "a second segment names a snapshot"}
	}
	if c.PrevHash != prev.ChainHash() {
		return &ChainError{Problem: ChainBadHash, Key: cur.Key, Prev: prev.Key, From: c.First, To: c.Last,
			Detail: fmt.Sprintf("it names previous hash %.12s…, the previous segment's is %.12s…", c.PrevHash, prev.ChainHash())}
	}
	if c.Token < p.Token {
		return &ChainError{Problem: ChainStale, Key: cur.Key, Prev: prev.Key, From: c.First, To: c.Last,
			Detail: fmt.Sprintf("token %d after %d", c.Token, p.Token)}
	}
	return nil
}

// ChainHash returns the chain hash of a listed segment (ChainLink.ChainHash):
// the sha256 of its stored bytes at level 0, read whole; a compacted
// segment's end hash, from its header (with trust configured, from a
// compacted segment parsed whole and trusted: its header is then what
// its signer wrote).
func (b *Repo) ChainHash(ctx context.Context, si SegmentInfo, ids []age.Identity) (string, error) {
	if si.Level == 0 {
		return b.StoredHash(ctx, si.Object.Key)
	}
	if b.Trust.Enabled() {
		s, _, err := b.ReadSegment(ctx, si, ids)
		if err != nil {
			return "", err
		}
		return s.EndHash, nil
	}
	_, h, _, err := b.ReadSegmentRaw(ctx, si, ids)
	if err != nil {
		return "", err
	}
	return h.EndHash, nil
}

// StoredHash returns the hex sha256 of a stored object's bytes, streamed.
func (b *Repo) StoredHash(ctx context.Context, key string) (string, error) {
	rc, err := b.Store.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read segment %s: %w", key, err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		return "", fmt.Errorf("read segment %s: %w", key, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
