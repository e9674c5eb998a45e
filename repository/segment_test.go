package repository

import (
	"bytes"
	"errors"
	"path"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"
)

var segT0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// segHeader returns the header of the first segment after a snapshot at
// revision snap, holding first..last.
func segHeader(snap, first, last int64) SegmentHeader {
	return SegmentHeader{
		Format: SegmentFormat, ClusterID: 0xcafe, Generation: "20261201T100000Z-r100",
		SnapshotID: "20261201T100000Z-r100", SnapshotRevision: snap,
		First: first, Last: last, CapturedThrough: last, CapturedAt: segT0.Add(time.Minute), Token: 7,
	}
}

func put(key, value string, lease, create, version int64) Op {
	return Op{Key: []byte(key), Value: []byte(value), Lease: lease, CreateRevision: create, Version: version}
}

func del(key string) Op { return Op{Delete: true, Key: []byte(key)} }

func rev(r int64, ops ...Op) Revision {
	return Revision{Revision: r, Received: segT0.Add(time.Duration(r) * time.Millisecond), Ops: ops}
}

// segmentCases are valid segments covering what a segment can hold.
func segmentCases() map[string]*Segment {
	binKey := []byte{0, 0xff, 0xfe, '/', 0x80, 0}
	binValue := make([]byte, 3<<20) // a 3 MiB value, every byte value
	for i := range binValue {
		binValue[i] = byte(i * 7)
	}
	next := segHeader(0, 201, 203)
	next.SnapshotID, next.PrevHash = "", strings.Repeat("ab", 32)
	empty := segHeader(0, 301, 305)
	empty.SnapshotID, empty.PrevHash = "", strings.Repeat("cd", 32)
	ahead := segHeader(100, 101, 102)
	ahead.CapturedThrough = 110
	compacted := segHeader(0, 201, 202)
	compacted.SnapshotID, compacted.PrevHash = "", strings.Repeat("ab", 32)
	compacted.Format, compacted.Level, compacted.EndHash = CompactedFormat, 2, strings.Repeat("ef", 32)
	compacted.Bucket = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	return map[string]*Segment{
		"compacted": {SegmentHeader: compacted, Revisions: []Revision{rev(201, del("/a")), rev(202, del("/b"))}},
		"puts": {SegmentHeader: segHeader(100, 101, 103), Revisions: []Revision{
			rev(101, put("/registry/pods/default/a", "v1", 0, 101, 1)),
			rev(102, put("/registry/pods/default/a", "v2", 0, 101, 2)),
			rev(103, put("/registry/pods/default/b", "", 0, 103, 1)),
		}},
		"deletes": {SegmentHeader: segHeader(100, 101, 102), Revisions: []Revision{
			rev(101, del("/registry/pods/default/a")),
			rev(102, del("/a"), del("/b"), del("/c")), // a delete-range: one revision
		}},
		"txn with several ops at one revision": {SegmentHeader: segHeader(100, 101, 101), Revisions: []Revision{
			rev(101, put("/x", "1", 0, 101, 1), del("/y"), put("/z", "3", 0, 50, 4)),
		}},
		"binary keys and values": {SegmentHeader: segHeader(100, 101, 101), Revisions: []Revision{
			rev(101, Op{Key: binKey, Value: binValue, CreateRevision: 101, Version: 1}),
		}},
		"leases": {SegmentHeader: segHeader(100, 101, 102), Revisions: []Revision{
			rev(101, put("/registry/leases/kube-node-lease/n1", "l", 0x694d7a1b2c3d4e5f, 101, 1)),
			rev(102, put("/registry/masterleases/10.0.0.1", "m", -5, 102, 1)),
		}, Leases: []Lease{{ID: 0x694d7a1b2c3d4e5f, TTL: 40, Revision: 101}, {ID: -5, TTL: 15, Revision: 102}}},
		"later segment": {SegmentHeader: next, Revisions: []Revision{rev(201, del("/a")), rev(202, del("/b")), rev(203, del("/c"))}},
		"empty segment advancing captured-through": {SegmentHeader: empty},
		"captured-through past last":               {SegmentHeader: ahead, Revisions: []Revision{rev(101, del("/a")), rev(102, del("/b"))}},
	}
}

var segCmp = cmp.Comparer(bytes.Equal) // nil and empty alike; fast on MiB values

func encodeRaw(t testing.TB, s *Segment) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := EncodeSegment(&buf, s); err != nil {
		t.Fatalf("EncodeSegment: %v", err)
	}
	return buf.Bytes()
}

func TestSegmentRoundTrip(t *testing.T) {
	id := newIdentity(t)
	encodings := map[string]struct {
		enc Encoding
		c   string
		e   string
	}{
		"none":     {Encoding{Compression: "none"}, "none", "none"},
		"zstd":     {Encoding{Compression: "zstd"}, "zstd", "none"},
		"zstd+age": {Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}}, "zstd", "age"},
		// A store whose snapshots are s2 keeps its segments zstd: the
		// stored segment is zstd, as its name (.seg.zst) says.
		"s2 store":     {Encoding{Compression: "s2"}, "zstd", "none"},
		"s2 store+age": {Encoding{Compression: "s2", Recipients: []age.Recipient{id.Recipient()}}, "zstd", "age"},
	}
	for name, s := range segmentCases() {
		for ename, e := range encodings {
			t.Run(name+"/"+ename, func(t *testing.T) {
				data, err := EncodeStoredSegment(s, e.enc)
				if err != nil {
					t.Fatal(err)
				}
				key := (&Repo{Cluster: "c"}).SegmentKey("g", 1, 2, e.enc)
				if _, _, c, enc, err := ParseSegmentName(path.Base(key)); err != nil || c != e.c || enc != e.e {
					t.Errorf("segment key %s: compression %q, encryption %q, err %v; want %q, %q", key, c, enc, err, e.c, e.e)
				}
				got, err := DecodeStoredSegment(bytes.NewReader(data), e.c, e.e, []age.Identity{id})
				if err != nil {
					t.Fatalf("DecodeStoredSegment: %v", err)
				}
				if d := cmp.Diff(s, got, segCmp); d != "" {
					t.Errorf("round trip (-want +got):\n%s", d)
				}
			})
		}
	}
}

func TestSegmentWrongIdentity(t *testing.T) {
	id, other := newIdentity(t), newIdentity(t)
	data, err := EncodeStoredSegment(segmentCases()["puts"], Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeStoredSegment(bytes.NewReader(data), "zstd", "age", []age.Identity{other}); !errors.Is(err, ErrDecrypt) || errors.Is(err, ErrBadSegment) {
		t.Errorf("wrong identity: %v, want ErrDecrypt and not ErrBadSegment", err)
	}
	if _, err := DecodeStoredSegment(bytes.NewReader(data), "zstd", "age", nil); !errors.Is(err, ErrNoIdentity) {
		t.Errorf("no identity: %v, want ErrNoIdentity", err)
	}
}

// TestSegmentCorruption: every truncation and every flipped byte of a
// small segment, raw, compressed and encrypted, is refused with
// ErrBadSegment (never a panic, never a different segment).
func TestSegmentCorruption(t *testing.T) {
	id := newIdentity(t)
	s := segmentCases()["leases"]
	s.Revisions = append(s.Revisions, rev(103, put("/x", "1", 0, 103, 1), del("/y")))
	s.Last, s.CapturedThrough = 103, 104
	for _, e := range []struct {
		name string
		enc  Encoding
		c, e string
	}{
		{"none", Encoding{Compression: "none"}, "none", "none"},
		{"zstd", Encoding{Compression: "zstd"}, "zstd", "none"},
		{"zstd+age", Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}}, "zstd", "age"},
	} {
		t.Run(e.name, func(t *testing.T) {
			data, err := EncodeStoredSegment(s, e.enc)
			if err != nil {
				t.Fatal(err)
			}
			for n := range len(data) {
				_, err := DecodeStoredSegment(bytes.NewReader(data[:n]), e.c, e.e, []age.Identity{id})
				if !errors.Is(err, ErrBadSegment) {
					t.Fatalf("truncated to %d of %d bytes: %v, want ErrBadSegment", n, len(data), err)
				}
			}
			for i := range len(data) {
				bad := bytes.Clone(data)
				bad[i] ^= 0x10
				got, err := DecodeStoredSegment(bytes.NewReader(bad), e.c, e.e, []age.Identity{id})
				switch {
				case err == nil:
					// A flag zstd ignores: the content must be intact
					// (the chain's hash of the stored bytes still tells).
					if d := cmp.Diff(s, got, segCmp); d != "" {
						t.Fatalf("byte %d of %d flipped: a different segment parsed (-want +got):\n%s", i, len(data), d)
					}
				case errors.Is(err, ErrBadSegment):
				case e.e == "age" && errors.Is(err, ErrDecrypt):
					// age cannot tell a damaged recipient stanza from
					// another recipient's: a refusal too.
				default:
					t.Fatalf("byte %d of %d flipped: %v, want ErrBadSegment", i, len(data), err)
				}
			}
			if _, err := DecodeStoredSegment(bytes.NewReader(append(bytes.Clone(data), 0)), e.c, e.e, []age.Identity{id}); !errors.Is(err, ErrBadSegment) {
				t.Errorf("a byte appended: %v, want ErrBadSegment", err)
			}
		})
	}
}

// TestSegmentInvalid: well-formed bytes that break the format's rules are
// refused by the encoder and, written anyway, by the parser.
func TestSegmentInvalid(t *testing.T) {
	base := func() *Segment {
		return &Segment{SegmentHeader: segHeader(100, 101, 102), Revisions: []Revision{rev(101, del("/a")), rev(102, del("/b"))}}
	}
	tests := map[string]func(s *Segment){
		"first after last":               func(s *Segment) { s.First, s.Last, s.SnapshotRevision = 103, 102, 102; s.Revisions = nil },
		"first does not follow snapshot": func(s *Segment) { s.SnapshotRevision = 99 },
		"revision skipped":               func(s *Segment) { s.Revisions[1].Revision = 103; s.Last, s.CapturedThrough = 103, 103 },
		"revisions out of order":         func(s *Segment) { s.Revisions[0], s.Revisions[1] = s.Revisions[1], s.Revisions[0] },
		"revision repeated":              func(s *Segment) { s.Revisions[1].Revision = 101 },
		"header range differs":           func(s *Segment) { s.Last, s.CapturedThrough = 103, 103 },
		"captured-through before last":   func(s *Segment) { s.CapturedThrough = 101 },
		"revision without ops":           func(s *Segment) { s.Revisions[1].Ops = nil },
		"empty key":                      func(s *Segment) { s.Revisions[0].Ops[0].Key = nil },
		"new key not created at its revision": func(s *Segment) {
			s.Revisions[0].Ops[0] = put("/a", "v", 0, 100, 1)
		},
		"old key created in the future": func(s *Segment) { s.Revisions[0].Ops[0] = put("/a", "v", 0, 101, 2) },
		"version 0":                     func(s *Segment) { s.Revisions[0].Ops[0] = put("/a", "v", 0, 101, 0) },
		"delete with a value":           func(s *Segment) { s.Revisions[0].Ops[0].Value = []byte("x") },
		"no token":                      func(s *Segment) { s.Token = 0 },
		"neither snapshot nor prev":     func(s *Segment) { s.SnapshotID = ""; s.SnapshotRevision = 0 },
		"both snapshot and prev":        func(s *Segment) { s.PrevHash = strings.Repeat("0", 64) },
		"bad prev hash":                 func(s *Segment) { s.SnapshotID, s.SnapshotRevision, s.PrevHash = "", 0, "xyz" },
		"generation with a slash":       func(s *Segment) { s.Generation = "a/b" },
		"lease outside the range":       func(s *Segment) { s.Leases = []Lease{{ID: 1, TTL: 5, Revision: 99}} },
		"lease twice":                   func(s *Segment) { s.Leases = []Lease{{ID: 1, TTL: 5, Revision: 101}, {ID: 1, TTL: 5, Revision: 102}} },
		"empty segment ahead":           func(s *Segment) { s.Revisions = nil; s.CapturedThrough = 110 },
	}
	for name, breakIt := range tests {
		t.Run(name, func(t *testing.T) {
			s := base()
			breakIt(s)
			if err := EncodeSegment(&bytes.Buffer{}, s); err == nil {
				t.Fatal("EncodeSegment accepted it")
			}
			if name == "delete with a value" {
				return // not representable: the raw form has no value for a delete
			}
			raw := encodeUnchecked(t, s)
			if _, err := ParseSegment(bytes.NewReader(raw)); !errors.Is(err, ErrBadSegment) {
				t.Fatalf("ParseSegment: %v, want ErrBadSegment", err)
			}
		})
	}
	if _, err := ParseSegment(strings.NewReader("PK\x03\x04 not a segment at all")); !errors.Is(err, ErrBadSegment) || !strings.Contains(err.Error(), "bad magic") {
		t.Errorf("not a segment: %v", err)
	}
	raw := encodeRaw(t, base())
	raw[len(segmentMagic)-1] = 9
	if _, err := ParseSegment(bytes.NewReader(raw)); !errors.Is(err, ErrBadSegment) || !strings.Contains(err.Error(), "format 9") {
		t.Errorf("future format: %v", err)
	}
}

// encodeUnchecked encodes s without Validate (as a buggy or hostile
// writer would).
func encodeUnchecked(t *testing.T, s *Segment) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeSegment(&buf, s, nil); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func FuzzParseSegment(f *testing.F) {
	for _, s := range segmentCases() {
		if len(s.Revisions) == 1 && len(s.Revisions[0].Ops[0].Value) > 1<<20 {
			continue // keep seeds small
		}
		f.Add(encodeRaw(f, s))
	}
	for _, raw := range signedSeeds(f) {
		f.Add(raw) // formats 3 and 4: the signature is read, the round trip is unsigned
	}
	f.Add([]byte{})
	f.Add(segmentMagic)
	f.Add(append(bytes.Clone(segmentMagic), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := ParseSegment(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrBadSegment) {
				t.Fatalf("error not ErrBadSegment: %v", err)
			}
			return
		}
		// What parses is valid and survives a round trip unchanged.
		var buf bytes.Buffer
		if err := EncodeSegment(&buf, s); err != nil {
			t.Fatalf("parsed segment does not encode: %v", err)
		}
		again, err := ParseSegment(&buf)
		if err != nil {
			t.Fatalf("re-encoded segment does not parse: %v", err)
		}
		if d := cmp.Diff(s, again, segCmp); d != "" {
			t.Fatalf("round trip of a parsed segment (-first +again):\n%s", d)
		}
	})
}
