package repository

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// compactSources are four linked segments of one generation as capture
// writes them: puts and deletes, a transaction, a 3 MiB value, leases (one
// seen again in a later segment), and an empty segment that only advances
// captured-through.
func compactSources() []*Segment {
	big := bytes.Repeat([]byte("0123456789abcdef"), 3<<16)
	h1 := segHeader(100, 101, 103)
	h2 := segHeader(0, 104, 105)
	h2.SnapshotID, h2.SnapshotRevision, h2.PrevHash, h2.Token = "", 0, strings.Repeat("ab", 32), 9
	h3 := segHeader(0, 106, 106)
	h3.SnapshotID, h3.SnapshotRevision, h3.PrevHash = "", 0, strings.Repeat("cd", 32)
	h4 := segHeader(0, 107, 108)
	h4.SnapshotID, h4.SnapshotRevision, h4.PrevHash, h4.CapturedThrough = "", 0, strings.Repeat("ef", 32), 120
	return []*Segment{
		{SegmentHeader: h1, Revisions: []Revision{
			rev(101, put("/registry/pods/default/a", "v1", 0x694d, 101, 1)),
			rev(102, put("/registry/pods/default/a", "v2", 0x694d, 101, 2), del("/registry/pods/default/b")),
			rev(103, Op{Key: []byte("/registry/configmaps/big"), Value: big, CreateRevision: 103, Version: 1}),
		}, Leases: []Lease{{ID: 0x694d, TTL: 40, Revision: 101}}},
		{SegmentHeader: h2, Revisions: []Revision{
			rev(104, put("/registry/leases/n1", "l", 0x694d, 104, 1)),
			rev(105, put("/registry/leases/n2", "m", -5, 105, 1)),
		}, Leases: []Lease{{ID: 0x694d, TTL: 40, Revision: 104}, {ID: -5, TTL: 15, Revision: 105}}},
		{SegmentHeader: h3, Revisions: []Revision{rev(106, del("/a"))}},
		{SegmentHeader: h4, Revisions: []Revision{rev(107, del("/b")), rev(108, put("/c", "3", 0, 108, 1))}},
	}
}

// TestCompactBuildIsTheMerge: a compacted segment built one source at a
// time (its records compressed as they come, the header and trailer
// framed apart) decodes to the raw form encodeSegment writes for the
// merge of its sources, byte for byte: compressed and not, encrypted and
// not, signed and not; and ReadSegment reads it as the merge.
func TestCompactBuildIsTheMerge(t *testing.T) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	key, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	st := CompactStep{Generation: "20261201T100000Z-r100", Level: 1, Bucket: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		name   string
		e      Encoding
		signed bool
	}{
		{"zstd", Encoding{Compression: "zstd"}, false},
		{"zstd age signed", Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}}, true},
		{"none", Encoding{Compression: "none"}, false},
		{"none age signed", Encoding{Compression: "none", Recipients: []age.Recipient{id.Recipient()}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srcs, links := compactSources(), []ChainLink{}
			for i, s := range srcs {
				links = append(links, ChainLink{Key: "k" + string(rune('0'+i)), Header: s.SegmentHeader, Hash: strings.Repeat(string(rune('0'+i)), 64)})
			}
			var g *segmentSigner
			if tc.signed {
				g = &segmentSigner{key: key, at: "prefix/changes/x"}
			}
			var want bytes.Buffer
			if err := encodeSegment(&want, merge(st, compactSources(), links), g); err != nil {
				t.Fatal(err)
			}

			c, err := newCompactBuild(tc.e)
			if err != nil {
				t.Fatal(err)
			}
			for i, s := range srcs {
				if err := c.add(SegmentInfo{}, s, links[i], rawSize(s)); err != nil {
					t.Fatal(err)
				}
				if len(s.Revisions) > 0 && s.Revisions[0].Ops != nil {
					t.Fatalf("source %d's revisions are still held after add", i)
				}
			}
			h := c.header(st)
			if err := c.finish(h, g); err != nil {
				t.Fatal(err)
			}
			rc := c.reader(tc.e)
			stored, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			dr, err := NewDecoder(bytes.NewReader(stored), tc.e.segmentEncoding().CompressionName(), tc.e.EncryptionName(), []age.Identity{id})
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(dr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want.Bytes()) {
				t.Fatalf("raw form differs from the merge's: %d bytes, want %d", len(got), want.Len())
			}
			seg, err := DecodeStoredSegment(bytes.NewReader(stored), tc.e.segmentEncoding().CompressionName(), tc.e.EncryptionName(), []age.Identity{id})
			if err != nil {
				t.Fatal(err)
			}
			if seg.First != 101 || seg.Last != 108 || seg.CapturedThrough != 120 || seg.Token != 9 || len(seg.Revisions) != 8 || len(seg.Leases) != 2 {
				t.Fatalf("decoded %d-%d through %d token %d, %d revisions, %d leases", seg.First, seg.Last, seg.CapturedThrough, seg.Token, len(seg.Revisions), len(seg.Leases))
			}
		})
	}
}

// TestCompactBuildRefusesAGap: sources that are not dense (a revision
// missing between two) are refused, as Validate refuses the merge.
func TestCompactBuildRefusesAGap(t *testing.T) {
	srcs := compactSources()
	c, err := newCompactBuild(Encoding{Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.add(SegmentInfo{}, srcs[0], ChainLink{}, 0); err != nil {
		t.Fatal(err)
	}
	err = c.add(SegmentInfo{}, srcs[2], ChainLink{}, 0)
	if err == nil || !strings.Contains(err.Error(), "revision 106 follows 103") {
		t.Fatalf("a gap: %v", err)
	}
}
