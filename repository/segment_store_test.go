package repository_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"filippo.io/age"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

var chainT0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// chainSegments returns a generation's segments after a snapshot at
// revision 8: 9-10 (crossing a digit, so that names must be padded to
// sort), 11-11 captured through 12 (revision 12 vouched empty), and an
// empty segment 13-20. PrevHash is left for the caller.
func chainSegments() []*repository.Segment {
	h := func(first, last, through int64) repository.SegmentHeader {
		return repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: "20261201T100000Z-r8",
			First: first, Last: last, CapturedThrough: through, CapturedAt: chainT0.Add(time.Duration(through) * time.Second), Token: 3}
	}
	p := func(r int64, key string) repository.Revision {
		return repository.Revision{Revision: r, Received: chainT0.Add(time.Duration(r) * time.Second),
			Ops: []repository.Op{{Key: []byte(key), Value: []byte("value of " + key), CreateRevision: r, Version: 1}}}
	}
	first := h(9, 10, 10)
	first.SnapshotID, first.SnapshotRevision = "20261201T100000Z-r8", 8
	return []*repository.Segment{
		{SegmentHeader: first, Revisions: []repository.Revision{p(9, "/a"), p(10, "/b")}, Leases: []repository.Lease{{ID: 0x1234, TTL: 60, Revision: 9}}},
		{SegmentHeader: h(11, 11, 12), Revisions: []repository.Revision{{Revision: 11, Received: chainT0.Add(11 * time.Second),
			Ops: []repository.Op{{Key: []byte("/a"), Value: []byte("v2"), CreateRevision: 9, Version: 2}, {Delete: true, Key: []byte("/b")}}}}},
		{SegmentHeader: h(13, 20, 20)},
	}
}

// TestSegmentStore stores a chain, encrypted, in a directory and in S3
// (versitygw), lists it in order, reads it back, checks it, and refuses a
// second writer's segment of the same range.
func TestSegmentStore(t *testing.T) {
	stores := map[string]func(t *testing.T) uploader.Store{
		"dir": func(t *testing.T) uploader.Store { return dirBackups(t, t.TempDir()).Store },
		"s3":  func(t *testing.T) uploader.Store { return newFaultEnv(t).store },
	}
	for name, newStore := range stores {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			b := repository.New(newStore(t), "prod")
			id, err := age.GenerateX25519Identity()
			if err != nil {
				t.Fatal(err)
			}
			enc := repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}}
			segs := chainSegments()
			var hashes []string
			prev := ""
			for _, s := range segs {
				if prev != "" {
					s.PrevHash = prev
				}
				o, h, err := b.PutSegment(ctx, s, enc)
				if err != nil {
					t.Fatalf("PutSegment %d-%d: %v", s.First, s.Last, err)
				}
				if !strings.HasSuffix(o.Key, ".seg.zst.age") || !strings.HasPrefix(o.Key, "prod/changes/20261201T100000Z-r8/") {
					t.Errorf("key %s", o.Key)
				}
				hashes = append(hashes, h)
				prev = h
			}
			// Not a segment: listed apart, never dropped.
			if _, err := b.Store.Put(ctx, "prod/changes/20261201T100000Z-r8/notes.txt", strings.NewReader("x"), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}

			// A second writer (another token) of the same range is refused.
			fork := chainSegments()[1]
			fork.PrevHash, fork.Token = hashes[0], 4
			if _, _, err := b.PutSegment(ctx, fork, enc); !errors.Is(err, uploader.ErrExists) {
				t.Errorf("second writer's PutSegment: %v, want ErrExists", err)
			}

			infos, unnamed, err := b.ListSegments(ctx, "20261201T100000Z-r8")
			if err != nil {
				t.Fatal(err)
			}
			if len(unnamed) != 1 || !strings.HasSuffix(unnamed[0].Key, "notes.txt") {
				t.Errorf("unnamed = %v, want notes.txt", unnamed)
			}
			var links []repository.ChainLink
			for i, si := range infos {
				s, h, err := b.ReadSegment(ctx, si, []age.Identity{id})
				if err != nil {
					t.Fatalf("ReadSegment %s: %v", si.Object.Key, err)
				}
				if d := cmp.Diff(segs[i], s, cmp.Comparer(bytes.Equal)); d != "" {
					t.Errorf("segment %d (-put +read):\n%s", i, d)
				}
				if h != hashes[i] || si.Compression != "zstd" || si.Encryption != "age" {
					t.Errorf("segment %d: hash %s (put %s), %s/%s", i, h, hashes[i], si.Compression, si.Encryption)
				}
				links = append(links, repository.ChainLink{Key: si.Object.Key, Header: s.SegmentHeader, Hash: h})
				// Decoded only: the same header and hash, and the raw
				// form parses to the same segment.
				raw, hd, rh, err := b.ReadSegmentRaw(ctx, si, []age.Identity{id})
				if err != nil {
					t.Fatalf("ReadSegmentRaw %s: %v", si.Object.Key, err)
				}
				if d := cmp.Diff(s.SegmentHeader, hd); d != "" || rh != h {
					t.Errorf("segment %d raw: hash %s (read %s), header (-read +raw):\n%s", i, rh, h, d)
				}
				if ps, err := repository.ParseSegment(bytes.NewReader(raw)); err != nil {
					t.Errorf("segment %d: parse the raw form: %v", i, err)
				} else if d := cmp.Diff(s, ps, cmp.Comparer(bytes.Equal)); d != "" {
					t.Errorf("segment %d raw (-read +parsed):\n%s", i, d)
				}
			}
			if len(infos) != len(segs) {
				t.Fatalf("listed %d segments, want %d", len(infos), len(segs))
			}
			if err := repository.CheckChain(links); err != nil {
				t.Errorf("CheckChain: %v", err)
			}

			// A damaged object is ErrBadSegment.
			damaged := infos[1]
			if err := b.Store.Delete(ctx, damaged.Object.Key); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Store.Put(ctx, damaged.Object.Key, strings.NewReader("age-encryption.org/v1\n"), uploader.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := b.ReadSegment(ctx, damaged, []age.Identity{id}); !errors.Is(err, repository.ErrBadSegment) {
				t.Errorf("damaged segment: %v, want ErrBadSegment", err)
			}
			if _, _, _, err := b.ReadSegmentRaw(ctx, damaged, []age.Identity{id}); !errors.Is(err, repository.ErrBadSegment) {
				t.Errorf("damaged segment, raw: %v, want ErrBadSegment", err)
			}
		})
	}
}

func TestParseSegmentName(t *testing.T) {
	enc := repository.Encoding{Compression: "none"}
	name := repository.SegmentName(9, 1234567, enc)
	if name != "00000000000000000009-00000000000001234567.seg" {
		t.Errorf("SegmentName = %s", name)
	}
	tests := []struct {
		name        string
		first, last int64
		c, e        string
		bad         bool
	}{
		{name: name, first: 9, last: 1234567, c: "none", e: "none"},
		{name: "00000000000000000101-00000000000000000200.seg.zst", first: 101, last: 200, c: "zstd", e: "none"},
		{name: "00000000000000000101-00000000000000000200.seg.age", first: 101, last: 200, c: "none", e: "age"},
		{name: "00000000000000000101-00000000000000000200.seg.zst.age", first: 101, last: 200, c: "zstd", e: "age"},
		{name: "00000000000000000101-00000000000000000101.seg", first: 101, last: 101, c: "none", e: "none"},
		{name: "00000000000000000200-00000000000000000101.seg", bad: true},
		{name: "00000000000000000000-00000000000000000101.seg", bad: true},
		{name: "101-200.seg", bad: true},
		{name: "00000000000000000101-00000000000000000200.db", bad: true},
		{name: "00000000000000000101-00000000000000000200.seg.gz", bad: true},
		{name: "0000000000000000010a-00000000000000000200.seg", bad: true},
		{name: "+0000000000000000101-00000000000000000200.seg", bad: true},
		{name: "00000000000000000101_00000000000000000200.seg", bad: true},
		{name: "99999999999999999999-99999999999999999999.seg", bad: true},
		{name: "notes.txt", bad: true},
		{name: "00000000000000000101-00000000000000000200.L1-20261201T100000Z.seg.zst", first: 101, last: 200, c: "zstd", e: "none"},
		{name: "00000000000000000101-00000000000000000200.L12-20261201T100000Z.seg.zst.age", first: 101, last: 200, c: "zstd", e: "age"},
		{name: "00000000000000000101-00000000000000000200.L0-20261201T100000Z.seg", bad: true},
		{name: "00000000000000000101-00000000000000000200.L01-20261201T100000Z.seg", bad: true},
		{name: "00000000000000000101-00000000000000000200.L1-2026-12-01.seg", bad: true},
		{name: "00000000000000000101-00000000000000000200.L1.seg", bad: true},
		{name: "00000000000000000101-00000000000000000200.L99-20261201T100000Z.seg", bad: true},
	}
	for _, tt := range tests {
		first, last, c, e, err := repository.ParseSegmentName(tt.name)
		if tt.bad {
			if err == nil {
				t.Errorf("ParseSegmentName(%q) accepted", tt.name)
			}
			continue
		}
		if err != nil || first != tt.first || last != tt.last || c != tt.c || e != tt.e {
			t.Errorf("ParseSegmentName(%q) = %d, %d, %s, %s, %v", tt.name, first, last, c, e, err)
		}
	}
}

// TestCheckChain: every way a chain breaks is reported with its kind,
// its revisions and the segments, never merged.
func TestCheckChain(t *testing.T) {
	hash := func(c byte) string { return strings.Repeat(string(c), 64) }
	link := func(first, last, through, token int64, prev, own string) repository.ChainLink {
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: "g", First: first, Last: last,
			CapturedThrough: through, Token: token, PrevHash: prev}
		if prev == "" {
			h.SnapshotID, h.SnapshotRevision = "snap", first-1
		}
		return repository.ChainLink{Key: repository.SegmentName(first, last, repository.Encoding{}), Header: h, Hash: own}
	}
	good := []repository.ChainLink{
		link(101, 200, 200, 1, "", hash('a')),
		link(201, 250, 260, 1, hash('a'), hash('b')), // 251-260 vouched empty
		link(261, 261, 261, 2, hash('b'), hash('c')), // the lock passed on: a higher token continues
		link(262, 270, 270, 2, hash('c'), hash('d')), // an empty segment
	}
	if err := repository.CheckChain(good); err != nil {
		t.Fatalf("good chain: %v", err)
	}
	tests := []struct {
		name     string
		links    []repository.ChainLink
		problem  repository.ChainProblem
		from, to int64
		mention  string
	}{
		{name: "empty", problem: repository.ChainEmpty},
		{name: "start missing", links: good[1:], problem: repository.ChainNoStart, from: 201, to: 250},
		{name: "gap", links: []repository.ChainLink{good[0], link(205, 210, 210, 1, hash('a'), hash('x'))},
			problem: repository.ChainGap, from: 201, to: 204, mention: "revisions 201-204"},
		{name: "gap after captured-through", links: []repository.ChainLink{good[0], good[1], link(262, 270, 270, 1, hash('b'), hash('x'))},
			problem: repository.ChainGap, from: 261, to: 261},
		{name: "next starts at last+1, not captured-through+1", links: []repository.ChainLink{good[0], good[1], link(251, 270, 270, 1, hash('b'), hash('x'))},
			problem: repository.ChainOverlap, from: 251, to: 260},
		{name: "overlap by one writer", links: []repository.ChainLink{good[0], link(150, 220, 220, 1, hash('a'), hash('x'))},
			problem: repository.ChainOverlap, from: 150, to: 200},
		{name: "fork by a second writer", links: []repository.ChainLink{good[0], good[1], link(201, 240, 240, 9, hash('a'), hash('x'))},
			problem: repository.ChainFork, from: 201, to: 240, mention: "tokens 1 and 9"},
		{name: "wrong prev hash", links: []repository.ChainLink{good[0], link(201, 250, 260, 1, hash('z'), hash('b'))},
			problem: repository.ChainBadHash, from: 201, to: 250},
		{name: "stale writer", links: []repository.ChainLink{good[0], good[1], good[2], link(262, 270, 270, 1, hash('c'), hash('d'))},
			problem: repository.ChainStale, from: 262, to: 270},
		{name: "second snapshot", links: []repository.ChainLink{good[0], link(201, 210, 210, 1, "", hash('x'))},
			problem: repository.ChainMismatch, mention: "names a snapshot"},
	}
	other := link(201, 250, 260, 1, hash('a'), hash('b'))
	other.Header.ClusterID = 43
	tests = append(tests, struct {
		name     string
		links    []repository.ChainLink
		problem  repository.ChainProblem
		from, to int64
		mention  string
	}{name: "cluster ID changed", links: []repository.ChainLink{good[0], other}, problem: repository.ChainMismatch, mention: "cluster ID 2b after 2a"})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := repository.CheckChain(tt.links)
			var ce *repository.ChainError
			if !errors.As(err, &ce) {
				t.Fatalf("CheckChain: %v, want a *ChainError", err)
			}
			if ce.Problem != tt.problem || ce.From != tt.from || ce.To != tt.to {
				t.Errorf("got %s at %d-%d, want %s at %d-%d: %v", ce.Problem, ce.From, ce.To, tt.problem, tt.from, tt.to, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("%q does not mention %q", err, tt.mention)
			}
		})
	}
}
