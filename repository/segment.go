package repository

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// A change segment is one immutable object of a generation's change log:
// every revision in [First, Last], as a whole-keyspace watch from the
// generation's snapshot delivered them.
//
// # Revisions are dense
//
// In etcd's mvcc every write transaction that changes anything takes
// exactly one revision, and every revision has at least one event (a
// transaction that changes nothing, a delete that matches no key, a lease
// grant and a compaction take none). A whole-keyspace watch therefore sees
// every revision, and a missing revision means lost events: inside a
// segment the revisions are First, First+1, …, Last with no skip, and the
// parser refuses anything else. Compaction removes old revisions from
// etcd's history, never from a watch that is already past them; a watch
// that falls behind it gets ErrCompacted, which ends the generation.
//
// CapturedThrough (>= Last) is the revision through which the writer
// knows every event was seen (a progress notification). Revisions in
// (Last, CapturedThrough] are vouched to carry no event; a segment with
// no revisions at all (an empty segment, First = Last = the range it
// vouches for, CapturedThrough = Last) advances the recovery point. The
// next segment of the chain starts at CapturedThrough+1.
//
// # Encoding
//
// The raw form is a compact binary encoding, not JSON lines: values are
// etcd's opaque bytes of up to MiBs (Kubernetes stores protobuf), keys are
// bytes, not UTF-8, and JSON would have to base64 both (a third more
// bytes, and slower to write and read). Every byte string is a uvarint
// length then the bytes, integers are (u)varints, so nothing is escaped
// and nothing is lost:
//
//	magic "LBSEG\x00\x00\x01" (the last byte is the format version)
//	header: cluster ID (uvarint), generation (bytes), snapshot id (bytes),
//	        snapshot revision, first, last, captured-through (uvarints),
//	        captured-at (varint, Unix ns), prev hash (bytes), token (varint)
//	records, each a tag byte:
//	  'R' revision (uvarint), received (varint, Unix ns), op count
//	      (uvarint), then per op in sub-revision order:
//	        'P' key, value (bytes), lease (varint), create revision,
//	            version (uvarints)
//	        'D' key (bytes)
//	  'L' lease ID (varint), granted TTL in seconds (varint), revision
//	      first seen (uvarint)
//	  'E' end: then the sha256 of every byte before it, then nothing
//	      (or, in a signed format, the signature: see below).
//
// Format 2 is a compacted segment (see compact.go): the same, with the
// magic's last byte 2 and three more header fields after the token:
// level (uvarint), bucket (varint, Unix ns: the start of the time span
// it compacts) and end hash (bytes: the chain hash of the last segment
// it replaces, which the next segment of the chain names).
//
// Formats 3 and 4 are formats 1 and 2 signed (a writer with a signing
// key, Repo.Signer): the same bytes, the magic's last byte 3 or 4, and
// after the trailing sha256 the signature: the signing key's ID (8
// bytes, signing.PublicKey.ID in binary) and its ed25519 signature (64
// bytes) over signing's message of kind "change segment", the key the
// segment is stored at and that sha256, then nothing. The sha256 covers
// the magic, so a signed segment does not pass for an unsigned one
// without a new sha256 (and an unsigned segment is untrusted unless
// AllowUnsigned). A writer without a key writes formats 1 and 2, which
// lifeboat before signing reads; formats 3 and 4 it refuses ("upgrade
// lifeboat"). Parsing checks the signature's shape only; the Repo's
// readers check it against the Repo's Trust (trust.go).
//
// The stored object is the raw form encoded like a snapshot (Encoding:
// zstd, then age). The trailing sha256 makes a truncated or altered raw
// form fail even without compression; zstd's and age's own checks catch
// most damage to the stored bytes first. Any of these is ErrBadSegment.

// SegmentFormat is the format version of a segment as capture writes
// it (level 0); CompactedFormat that of a compacted segment (level 1 and
// up), which replaces a run of consecutive segments of its generation.
const (
	SegmentFormat   = 1
	CompactedFormat = 2
)

var (
	segmentMagic   = []byte("LBSEG\x00\x00\x01")
	compactedMagic = []byte("LBSEG\x00\x00\x02")
)

// signedFormat is added to a format's number in the magic of a signed
// segment (3: format 1 signed, 4: format 2 signed).
const signedFormat = 2

// segmentSigSize is the size of a signed segment's signature: the key ID
// and the ed25519 signature.
const segmentSigSize = keyIDSize + ed25519.SignatureSize

// keyIDSize is the binary size of a signing key's ID (16 hex digits).
const keyIDSize = 8

// segmentSeal is what ends a segment's raw form: the sha256 of every
// byte before it and, in a signed format, the signature over it (nil
// when unsigned).
type segmentSeal struct {
	sum []byte
	sig *signing.Signature
}

// segmentSigner signs a segment's raw form as it is encoded: with key,
// for the object key at.
type segmentSigner struct {
	key *signing.Key
	at  string
}

// trailer returns the signature that follows the raw form's sha256 sum.
func (g *segmentSigner) trailer(sum []byte) ([]byte, error) {
	sig := g.key.SignBytes(kindSegment, g.at, sum)
	id, err := hex.DecodeString(sig.KeyID)
	if err != nil || len(id) != keyIDSize {
		return nil, fmt.Errorf("sign segment %s: key ID %q", g.at, sig.KeyID)
	}
	ed, err := base64.StdEncoding.DecodeString(sig.Ed25519)
	if err != nil || len(ed) != ed25519.SignatureSize {
		return nil, fmt.Errorf("sign segment %s: malformed signature", g.at)
	}
	return append(id, ed...), nil
}

// parseSegmentSig reads a signed segment's signature (segmentSigSize
// bytes) into a signing.Signature.
func parseSegmentSig(b []byte) *signing.Signature {
	return &signing.Signature{KeyID: hex.EncodeToString(b[:keyIDSize]), Ed25519: base64.StdEncoding.EncodeToString(b[keyIDSize:])}
}

// maxLevel bounds a compacted segment's level.
const maxLevel = 16

// ErrBadSegment is wrapped when a segment object is truncated, corrupted
// or not a valid segment.
var ErrBadSegment = errors.New("bad change segment")

// Segment is one change segment: a header and its revisions.
type Segment struct {
	SegmentHeader
	// Revisions in strictly increasing, dense order: First, First+1, …, Last.
	Revisions []Revision
	// Leases first seen in this segment (on a PUT), in the order seen.
	Leases []Lease
}

// SegmentHeader names a segment's place in its generation's chain.
type SegmentHeader struct {
	// Format is the format version (SegmentFormat).
	Format int
	// ClusterID is etcd's cluster ID.
	ClusterID uint64
	// Generation is the id of the generation, a path segment of the
	// segment's key.
	Generation string
	// SnapshotID and SnapshotRevision name the generation's snapshot (the
	// backup id and its exact revision S, read from the file). Only the
	// first segment of a generation names them (and then First is S+1);
	// the others have "" and 0.
	SnapshotID       string
	SnapshotRevision int64
	// First and Last bound the revisions the segment holds (First <= Last).
	First, Last int64
	// CapturedThrough (>= Last) is the revision through which every event
	// was seen; CapturedAt is when lifeboat learned it.
	CapturedThrough int64
	CapturedAt      time.Time
	// PrevHash is the hex sha256 of the previous segment's stored bytes;
	// empty for the first segment of a generation.
	PrevHash string
	// Token is the writer's lock fencing token (non-zero); a compacted
	// segment carries the highest token of the segments it replaces.
	Token int64
	// Level is 0 for a segment as capture wrote it, n >= 1 for one that
	// compaction made from segments of lower levels (CompactedFormat).
	Level int
	// Bucket is the start of the time span a compacted segment covers
	// (its level's span); zero at level 0.
	Bucket time.Time
	// EndHash is a compacted segment's chain hash: the chain hash of the
	// last segment it replaces, which the next segment names as its
	// PrevHash. Empty at level 0, where the chain hash is the stored
	// bytes' sha256.
	EndHash string
}

// Revision is one etcd revision: one transaction's operations.
type Revision struct {
	Revision int64
	// Received is when lifeboat received the revision (etcd stores none).
	Received time.Time
	// Ops in sub-revision order (the index is the sub-revision).
	Ops []Op
}

// Op is one operation of a revision: a PUT or a DELETE.
type Op struct {
	Delete bool
	Key    []byte
	// Value, Lease, CreateRevision and Version are a PUT's (the mod
	// revision is the Revision's).
	Value          []byte
	Lease          int64
	CreateRevision int64
	Version        int64
}

// Lease is a lease as first seen on a PUT, with the TTL it was granted.
type Lease struct {
	ID       int64
	TTL      int64 // granted TTL, seconds
	Revision int64 // the revision of the PUT it was first seen on
}

// Validate checks the segment's invariants (those Parse enforces).
func (s *Segment) Validate() error {
	h := &s.SegmentHeader
	if err := h.validate(); err != nil {
		return err
	}
	if len(s.Revisions) > 0 {
		if f, l := s.Revisions[0].Revision, s.Revisions[len(s.Revisions)-1].Revision; f != h.First || l != h.Last {
			return fmt.Errorf("revisions %d-%d, header says %d-%d", f, l, h.First, h.Last)
		}
	} else if h.CapturedThrough != h.Last {
		return fmt.Errorf("empty segment %d-%d with captured-through %d: want captured-through = last", h.First, h.Last, h.CapturedThrough)
	}
	for i := range s.Revisions {
		r := &s.Revisions[i]
		if i > 0 && r.Revision != s.Revisions[i-1].Revision+1 {
			return fmt.Errorf("revision %d follows %d: revisions must be dense", r.Revision, s.Revisions[i-1].Revision)
		}
		if len(r.Ops) == 0 {
			return fmt.Errorf("revision %d has no operations", r.Revision)
		}
		for j, op := range r.Ops {
			if err := validOp(r.Revision, op); err != nil {
				return fmt.Errorf("revision %d sub-revision %d: %w", r.Revision, j, err)
			}
		}
	}
	seen := map[int64]bool{}
	for _, l := range s.Leases {
		switch {
		case l.ID == 0:
			return errors.New("lease ID 0")
		case seen[l.ID]:
			return fmt.Errorf("lease %x listed twice", l.ID)
		case l.Revision < h.First || l.Revision > h.Last:
			return fmt.Errorf("lease %x first seen at revision %d, outside %d-%d", l.ID, l.Revision, h.First, h.Last)
		}
		seen[l.ID] = true
	}
	return nil
}

// validate checks the header's own invariants (Validate's first part).
func (h *SegmentHeader) validate() error {
	switch h.Format {
	case SegmentFormat:
		if h.Level != 0 || !h.Bucket.IsZero() || h.EndHash != "" {
			return fmt.Errorf("format %d with compaction fields (level %d)", h.Format, h.Level)
		}
	case CompactedFormat:
		switch {
		case h.Level < 1 || h.Level > maxLevel:
			return fmt.Errorf("compacted segment of level %d: want 1-%d", h.Level, maxLevel)
		case h.Bucket.IsZero():
			return errors.New("compacted segment without a bucket time")
		case !isHexSHA256(h.EndHash):
			return fmt.Errorf("end hash %q is not a hex sha256", h.EndHash)
		}
	default:
		return fmt.Errorf("format %d, this lifeboat reads %d and %d", h.Format, SegmentFormat, CompactedFormat)
	}
	if err := validGeneration(h.Generation); err != nil {
		return err
	}
	switch {
	case h.First < 1 || h.First > h.Last:
		return fmt.Errorf("revisions %d-%d: want 1 <= first <= last", h.First, h.Last)
	case h.CapturedThrough < h.Last:
		return fmt.Errorf("captured-through %d is before last revision %d", h.CapturedThrough, h.Last)
	case h.Token == 0:
		return errors.New("no fencing token")
	case h.SnapshotID == "" && h.PrevHash == "":
		return errors.New("neither a previous segment's hash nor a snapshot")
	case h.SnapshotID != "" && h.PrevHash != "":
		return errors.New("both a previous segment's hash and a snapshot")
	case h.SnapshotID != "" && h.First != h.SnapshotRevision+1:
		return fmt.Errorf("first revision %d does not follow snapshot %s at revision %d", h.First, h.SnapshotID, h.SnapshotRevision)
	case h.SnapshotID == "" && h.SnapshotRevision != 0:
		return fmt.Errorf("snapshot revision %d without a snapshot id", h.SnapshotRevision)
	case h.PrevHash != "" && !isHexSHA256(h.PrevHash):
		return fmt.Errorf("previous hash %q is not a hex sha256", h.PrevHash)
	}
	return nil
}

// validOp checks etcd's invariants of a PUT at rev: a new key (version 1)
// was created at rev, an existing one before it.
func validOp(rev int64, op Op) error {
	if len(op.Key) == 0 {
		return errors.New("empty key")
	}
	if op.Delete {
		if len(op.Value) > 0 || op.Lease != 0 || op.CreateRevision != 0 || op.Version != 0 {
			return errors.New("delete with put fields")
		}
		return nil
	}
	switch {
	case op.Version < 1:
		return fmt.Errorf("put version %d", op.Version)
	case op.Version == 1 && op.CreateRevision != rev:
		return fmt.Errorf("put version 1 created at %d, not at its revision", op.CreateRevision)
	case op.Version > 1 && (op.CreateRevision < 1 || op.CreateRevision >= rev):
		return fmt.Errorf("put version %d created at %d: want before its revision", op.Version, op.CreateRevision)
	}
	return nil
}

// EncodeSegment writes the raw form of s to w (see the format above),
// unsigned, after checking it with Validate. A Repo with a Signer signs
// the segments it stores (PutSegment, Compact).
func EncodeSegment(w io.Writer, s *Segment) error {
	return encodeSegmentSigned(w, s, nil)
}

// encodeSegmentSigned is EncodeSegment, signed by g unless g is nil.
func encodeSegmentSigned(w io.Writer, s *Segment, g *segmentSigner) error {
	if err := s.Validate(); err != nil {
		return fmt.Errorf("encode segment: %w", err)
	}
	return encodeSegment(w, s, g)
}

// encodeSegment writes s without checking it, signed by g unless g is
// nil.
func encodeSegment(w io.Writer, s *Segment, g *segmentSigner) error {
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(w, h), 64<<10)
	e := &segWriter{w: bw}
	e.head(&s.SegmentHeader, g != nil)
	for i := range s.Revisions {
		e.revision(&s.Revisions[i])
	}
	e.leasesAndEnd(s.Leases)
	if e.err == nil {
		e.err = bw.Flush()
	}
	if e.err != nil {
		return fmt.Errorf("encode segment: %w", e.err)
	}
	return writeSeal(w, h.Sum(nil), g)
}

// writeSeal writes what follows a raw form's 'E': its sha256 sum and, with
// g, the signature over it.
func writeSeal(w io.Writer, sum []byte, g *segmentSigner) error {
	if _, err := w.Write(sum); err != nil {
		return fmt.Errorf("encode segment: %w", err)
	}
	if g != nil {
		sig, err := g.trailer(sum)
		if err != nil {
			return err
		}
		if _, err := w.Write(sig); err != nil {
			return fmt.Errorf("encode segment: %w", err)
		}
	}
	return nil
}

// head writes the magic (signed or not) and the header.
func (e *segWriter) head(hd *SegmentHeader, signed bool) {
	magic := segmentMagic
	if hd.Format == CompactedFormat {
		magic = compactedMagic
	}
	if signed {
		magic = bytes.Clone(magic)
		magic[len(magic)-1] += signedFormat
	}
	e.raw(magic)
	e.uvarint(hd.ClusterID)
	e.str([]byte(hd.Generation))
	e.str([]byte(hd.SnapshotID))
	e.uvarint(uint64(hd.SnapshotRevision))
	e.uvarint(uint64(hd.First))
	e.uvarint(uint64(hd.Last))
	e.uvarint(uint64(hd.CapturedThrough))
	e.varint(unixNano(hd.CapturedAt))
	e.str([]byte(hd.PrevHash))
	e.varint(hd.Token)
	if hd.Format == CompactedFormat {
		e.uvarint(uint64(hd.Level))
		e.varint(unixNano(hd.Bucket))
		e.str([]byte(hd.EndHash))
	}
}

// revision writes one 'R' record with its ops.
func (e *segWriter) revision(r *Revision) {
	e.raw([]byte{'R'})
	e.uvarint(uint64(r.Revision))
	e.varint(unixNano(r.Received))
	e.uvarint(uint64(len(r.Ops)))
	for _, op := range r.Ops {
		if op.Delete {
			e.raw([]byte{'D'})
			e.str(op.Key)
			continue
		}
		e.raw([]byte{'P'})
		e.str(op.Key)
		e.str(op.Value)
		e.varint(op.Lease)
		e.uvarint(uint64(op.CreateRevision))
		e.uvarint(uint64(op.Version))
	}
}

// leasesAndEnd writes the 'L' records and the 'E' that ends the records.
func (e *segWriter) leasesAndEnd(ls []Lease) {
	for _, l := range ls {
		e.raw([]byte{'L'})
		e.varint(l.ID)
		e.varint(l.TTL)
		e.uvarint(uint64(l.Revision))
	}
	e.raw([]byte{'E'})
}

func unixNano(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNano(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

type segWriter struct {
	w   *bufio.Writer
	buf [binary.MaxVarintLen64]byte
	err error
}

func (e *segWriter) raw(p []byte) {
	if e.err == nil {
		_, e.err = e.w.Write(p)
	}
}
func (e *segWriter) uvarint(v uint64) { e.raw(binary.AppendUvarint(e.buf[:0], v)) }
func (e *segWriter) varint(v int64)   { e.raw(binary.AppendVarint(e.buf[:0], v)) }
func (e *segWriter) str(p []byte)     { e.uvarint(uint64(len(p))); e.raw(p) }

// maxSegmentString bounds one key or value in a segment (etcd's request
// limit is configurable; 2 GiB is far above any).
const maxSegmentString = 2 << 30

// ParseSegment reads the raw form of a segment from r to its end, checks
// its sha256 and its invariants (Validate). Any failure wraps
// ErrBadSegment. Memory grows with the bytes actually read, never with a
// length the input claims.
//
// A signed segment's signature is read, not checked: that is the Repo's
// (ReadSegment, ReadSegmentRaw), which knows the key it is stored at and
// whom to trust.
func ParseSegment(r io.Reader) (*Segment, error) {
	s, _, err := parseSegmentSealed(r)
	return s, err
}

// parseSegmentSealed is ParseSegment returning the segment's seal too.
func parseSegmentSealed(r io.Reader) (*Segment, segmentSeal, error) {
	s, seal, err := parseSegment(r)
	if err != nil {
		return nil, segmentSeal{}, fmt.Errorf("%w: %w", ErrBadSegment, err)
	}
	return s, seal, nil
}

func parseSegment(r io.Reader) (*Segment, segmentSeal, error) {
	h := sha256.New()
	hr := &hashingReader{r: bufio.NewReaderSize(r, 64<<10), h: h}
	return parseSegmentFrom(&segReader{r: hr}, func() []byte { return h.Sum(nil) }, func() bool {
		_, err := hr.r.ReadByte()
		return err == io.EOF
	})
}

// parseSegmentFrom parses a segment's raw form from d: sum is the sha256
// of what d has read so far, atEnd whether d is at the end of its input.
// It returns the segment and its seal (the sha256 and the signature, if
// signed).
func parseSegmentFrom(d *segReader, sum func() []byte, atEnd func() bool) (*Segment, segmentSeal, error) {
	s := &Segment{}
	signed, err := d.header(&s.SegmentHeader)
	if err != nil {
		return nil, segmentSeal{}, err
	}
	for d.err == nil {
		tag := d.byte()
		if d.err != nil {
			break
		}
		switch tag {
		case 'R':
			rv := Revision{Revision: d.rev(), Received: fromUnixNano(d.varint())}
			n := d.uvarint() // Ops grow with the bytes read, not with n
			for i := uint64(0); i < n && d.err == nil; i++ {
				var op Op
				switch d.byte() {
				case 'P':
					op.Key = d.str(maxSegmentString)
					op.Value = d.value(maxSegmentString)
					op.Lease = d.varint()
					op.CreateRevision = d.rev()
					op.Version = d.rev()
				case 'D':
					op.Delete = true
					op.Key = d.str(maxSegmentString)
				default:
					if d.err == nil {
						d.err = fmt.Errorf("revision %d: unknown operation", rv.Revision)
					}
				}
				rv.Ops = append(rv.Ops, op)
			}
			s.Revisions = append(s.Revisions, rv)
		case 'L':
			s.Leases = append(s.Leases, Lease{ID: d.varint(), TTL: d.varint(), Revision: d.rev()})
		case 'E':
			if d.err != nil {
				return nil, segmentSeal{}, d.err
			}
			want := sum()
			got := d.bytes(sha256.Size)
			if d.err != nil {
				return nil, segmentSeal{}, fmt.Errorf("checksum: %w", d.err)
			}
			if !bytes.Equal(got, want) {
				return nil, segmentSeal{}, errors.New("checksum mismatch: the segment is corrupted")
			}
			seal := segmentSeal{sum: got}
			if signed {
				sig := d.bytes(segmentSigSize)
				if d.err != nil {
					return nil, segmentSeal{}, fmt.Errorf("signature: %w", d.err)
				}
				seal.sig = parseSegmentSig(sig)
			}
			if !atEnd() {
				return nil, segmentSeal{}, errors.New("bytes after the checksum")
			}
			if err := s.Validate(); err != nil {
				return nil, segmentSeal{}, err
			}
			return s, seal, nil
		default:
			return nil, segmentSeal{}, fmt.Errorf("unknown record tag %#x", tag)
		}
	}
	return nil, segmentSeal{}, d.err
}

// ParseSegmentHeader reads only the header at the start of a segment's
// raw form and checks its own invariants: for a reader that passes the
// raw form on to one that parses it whole (ParseSegment checks the
// records and the sha256). Any failure wraps ErrBadSegment.
func ParseSegmentHeader(r io.Reader) (SegmentHeader, error) {
	hd, _, err := parseSegmentHeader(r)
	return hd, err
}

// parseSegmentHeader is ParseSegmentHeader, also saying whether the
// segment is signed.
func parseSegmentHeader(r io.Reader) (SegmentHeader, bool, error) {
	var hd SegmentHeader
	d := &segReader{r: &hashingReader{r: bufio.NewReaderSize(r, 4<<10), h: sha256.New()}}
	signed, err := d.header(&hd)
	if err == nil {
		err = hd.validate()
	}
	if err != nil {
		return SegmentHeader{}, false, fmt.Errorf("%w: %w", ErrBadSegment, err)
	}
	return hd, signed, nil
}

// header reads the magic and the header into hd, and says whether the
// magic names a signed format.
func (d *segReader) header(hd *SegmentHeader) (signed bool, err error) {
	magic := d.bytes(uint64(len(segmentMagic)))
	if d.err != nil {
		return false, d.err
	}
	if !bytes.Equal(magic[:len(magic)-1], segmentMagic[:len(segmentMagic)-1]) {
		return false, errors.New("not a change segment (bad magic)")
	}
	hd.Format = int(magic[len(magic)-1])
	if hd.Format == SegmentFormat+signedFormat || hd.Format == CompactedFormat+signedFormat {
		hd.Format -= signedFormat
		signed = true
	}
	if hd.Format != SegmentFormat && hd.Format != CompactedFormat {
		return false, fmt.Errorf("format %d, this lifeboat reads %d and %d (%d and %d signed): upgrade lifeboat", hd.Format,
			SegmentFormat, CompactedFormat, SegmentFormat+signedFormat, CompactedFormat+signedFormat)
	}
	hd.ClusterID = d.uvarint()
	hd.Generation = string(d.str(256))
	hd.SnapshotID = string(d.str(256))
	hd.SnapshotRevision = d.rev()
	hd.First = d.rev()
	hd.Last = d.rev()
	hd.CapturedThrough = d.rev()
	hd.CapturedAt = fromUnixNano(d.varint())
	hd.PrevHash = string(d.str(64))
	hd.Token = d.varint()
	if hd.Format == CompactedFormat {
		hd.Level = int(min(d.uvarint(), maxLevel+1))
		hd.Bucket = fromUnixNano(d.varint())
		hd.EndHash = string(d.str(64))
	}
	return signed, d.err
}

type segReader struct {
	r interface {
		io.Reader
		io.ByteReader
	}
	err error
}

// hashingReader hashes the bytes it returns (and only those: the bufio
// reader below reads ahead).
type hashingReader struct {
	r   *bufio.Reader
	h   hash.Hash
	one [1]byte
}

func (r *hashingReader) ReadByte() (byte, error) {
	b, err := r.r.ReadByte()
	if err == nil {
		r.one[0] = b
		r.h.Write(r.one[:])
	}
	return b, err
}

func (r *hashingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.h.Write(p[:n])
	return n, err
}

func (d *segReader) fail(err error) {
	if d.err == nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			err = errors.New("truncated")
		}
		d.err = err
	}
}

func (d *segReader) byte() byte {
	if d.err != nil {
		return 0
	}
	b, err := d.r.ReadByte()
	if err != nil {
		d.fail(err)
	}
	return b
}

func (d *segReader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadUvarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

func (d *segReader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, err := binary.ReadVarint(d.r)
	if err != nil {
		d.fail(err)
	}
	return v
}

// rev reads a revision-like uvarint that must fit an int64.
func (d *segReader) rev() int64 {
	v := d.uvarint()
	if v > 1<<63-1 {
		d.fail(fmt.Errorf("revision %d out of range", v))
		return 0
	}
	return int64(v)
}

func (d *segReader) str(limit uint64) []byte {
	n := d.uvarint()
	if d.err == nil && n > limit {
		d.fail(fmt.Errorf("a string of %d bytes (at most %d)", n, limit))
	}
	return d.bytes(n)
}

// bytes reads n bytes, allocating at most 1 MiB ahead of what was read.
func (d *segReader) bytes(n uint64) []byte {
	if d.err != nil {
		return nil
	}
	if n <= 1<<20 {
		b := make([]byte, n)
		if _, err := io.ReadFull(d.r, b); err != nil {
			d.fail(err)
			return nil
		}
		return b
	}
	var buf bytes.Buffer
	if m, err := io.CopyN(&buf, d.r, int64(n)); err != nil || uint64(m) != n {
		d.fail(io.ErrUnexpectedEOF)
		return nil
	}
	return buf.Bytes()
}

// EncodeStoredSegment returns the stored form of s: the raw form encoded
// with e (zstd unless e compresses nothing, then age), unsigned.
func EncodeStoredSegment(s *Segment, e Encoding) ([]byte, error) {
	return encodeStoredSegment(s, e, nil)
}

// encodeStoredSegment is EncodeStoredSegment, signed by g unless g is
// nil.
func encodeStoredSegment(s *Segment, e Encoding, g *segmentSigner) ([]byte, error) {
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("encode segment: %w", err)
	}
	var buf bytes.Buffer
	w, err := NewEncoder(&buf, e.segmentEncoding())
	if err != nil {
		return nil, fmt.Errorf("encode segment: %w", err)
	}
	if err := encodeSegment(w, s, g); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("encode segment: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeStoredSegment parses a stored segment encoded as compression and
// encryption say. A truncated or corrupted object wraps ErrBadSegment; a
// missing or wrong identity wraps ErrNoIdentity or ErrDecrypt instead.
func DecodeStoredSegment(r io.Reader, compression, encryption string, ids []age.Identity) (*Segment, error) {
	return decodeStored(r, compression, encryption, ids, ParseSegment)
}

// sealedSegment is a parsed segment with its seal.
type sealedSegment struct {
	seg  *Segment
	seal segmentSeal
}

// decodeStoredSealed is DecodeStoredSegment returning the seal too.
func decodeStoredSealed(r io.Reader, compression, encryption string, ids []age.Identity) (sealedSegment, error) {
	return decodeStored(r, compression, encryption, ids, func(r io.Reader) (sealedSegment, error) {
		s, seal, err := parseSegmentSealed(r)
		return sealedSegment{s, seal}, err
	})
}

// decodeStored runs read over the raw form of a stored segment, with
// DecodeStoredSegment's errors.
func decodeStored[T any](r io.Reader, compression, encryption string, ids []age.Identity, read func(io.Reader) (T, error)) (T, error) {
	var zero T
	dr, err := NewDecoder(r, compression, encryption, ids)
	if err != nil {
		if errors.Is(err, ErrNoIdentity) || errors.Is(err, ErrDecrypt) {
			return zero, err
		}
		return zero, fmt.Errorf("%w: %w", ErrBadSegment, err)
	}
	defer dr.Close()
	v, err := read(dr)
	if err != nil {
		if !errors.Is(err, ErrBadSegment) {
			err = fmt.Errorf("%w: %w", ErrBadSegment, err)
		}
		return zero, err
	}
	return v, nil
}
