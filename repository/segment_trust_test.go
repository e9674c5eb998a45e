package repository_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

var segT0 = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

func newKey(t *testing.T) *signing.Key {
	t.Helper()
	k, err := signing.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// signedAs returns a Repo over b's store and cluster that signs with k
// (nil: unsigned) and checks nothing.
func signedAs(b *repository.Repo, k *signing.Key) *repository.Repo {
	return &repository.Repo{Store: b.Store, Cluster: b.Cluster, Signer: k}
}

// trusting returns a Repo over b's store that trusts keys.
func trusting(b *repository.Repo, allowUnsigned bool, keys ...*signing.Key) *repository.Repo {
	r := repository.New(b.Store, b.Cluster)
	r.Trust = &signing.Trust{AllowUnsigned: allowUnsigned}
	for _, k := range keys {
		r.Trust.Keys = append(r.Trust.Keys, k.Public())
	}
	return r
}

// chainSegment is segment [first, last] of gen after snapshot snapRev,
// one PUT per revision.
func chainSegment(gen string, snapRev, first, last int64, prev string) *repository.Segment {
	h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: gen,
		First: first, Last: last, CapturedThrough: last, CapturedAt: segT0.Add(time.Duration(last) * time.Second), Token: 1, PrevHash: prev}
	if prev == "" {
		h.SnapshotID, h.SnapshotRevision = gen, snapRev
	}
	s := &repository.Segment{SegmentHeader: h}
	for rev := first; rev <= last; rev++ {
		s.Revisions = append(s.Revisions, repository.Revision{Revision: rev, Received: segT0.Add(time.Duration(rev) * time.Second),
			Ops: []repository.Op{{Key: []byte("/k"), Value: []byte("value"), CreateRevision: snapRev + 1, Version: rev - snapRev}}})
	}
	return s
}

// putSignedChain stores gen's segments over ranges, chained, the i-th
// signed by signers[i] (nil: unsigned), and returns them as listed.
func putSignedChain(t *testing.T, b *repository.Repo, gen string, snapRev int64, ranges [][2]int64, signers []*signing.Key) []repository.SegmentInfo {
	t.Helper()
	prev := ""
	for i, r := range ranges {
		_, hash, err := signedAs(b, signers[i]).PutSegment(t.Context(), chainSegment(gen, snapRev, r[0], r[1], prev), repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatalf("PutSegment %v: %v", r, err)
		}
		prev = hash
	}
	segs, _, err := b.ListSegments(t.Context(), gen)
	if err != nil {
		t.Fatal(err)
	}
	return segs
}

// rawOf decodes a stored zstd segment to its raw form.
func rawOf(t *testing.T, st uploader.Store, key string) []byte {
	t.Helper()
	rc, err := st.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dr, err := repository.NewDecoder(rc, "zstd", "none", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dr.Close()
	raw, err := io.ReadAll(dr)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// storeRaw replaces the object at key with raw, zstd-encoded.
func storeRaw(t *testing.T, st uploader.Store, key string, raw []byte) {
	t.Helper()
	var buf bytes.Buffer
	w, err := repository.NewEncoder(&buf, repository.Encoding{Compression: "zstd"})
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(t.Context(), key); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Put(t.Context(), key, &buf, uploader.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wantUntrusted fails unless err is an *UntrustedError naming key and
// wrapping why.
func wantUntrusted(t *testing.T, what string, err error, key string, why error) {
	t.Helper()
	var ue *repository.UntrustedError
	switch {
	case !errors.Is(err, repository.ErrUntrusted) || !errors.As(err, &ue):
		t.Errorf("%s: %v, want an *UntrustedError", what, err)
	case ue.Key != key:
		t.Errorf("%s: untrusted %s, want %s", what, ue.Key, key)
	case why != nil && !errors.Is(err, why):
		t.Errorf("%s: %v, want %v", what, err, why)
	}
}

// TestSegmentFormatSigned: a Repo with a signer stores format 3 (format 1
// signed), one without format 1 as before (readable by lifeboat before
// signing); both parse with ParseSegment and ParseSegmentBytes.
func TestSegmentFormatSigned(t *testing.T) {
	b := dirBackups(t, t.TempDir())
	key := newKey(t)
	for _, tc := range []struct {
		name   string
		signer *signing.Key
		format byte
		size   int
	}{{"unsigned", nil, 1, 0}, {"signed", key, 3, 72}} {
		t.Run(tc.name, func(t *testing.T) {
			gen := "20261201T090000Z-r10" + tc.name
			segs := putSignedChain(t, b, gen, 10, [][2]int64{{11, 12}}, []*signing.Key{tc.signer})
			raw := rawOf(t, b.Store, segs[0].Object.Key)
			if raw[7] != tc.format {
				t.Errorf("format byte %d, want %d", raw[7], tc.format)
			}
			// 'E', the sha256 of everything before, then the signature.
			if e := raw[len(raw)-tc.size-sha256.Size-1]; e != 'E' {
				t.Errorf("byte before the sha256 is %q, want 'E'", e)
			}
			if sum := sha256.Sum256(raw[:len(raw)-tc.size-sha256.Size]); !bytes.Equal(sum[:], raw[len(raw)-tc.size-sha256.Size:len(raw)-tc.size]) {
				t.Error("the sha256 does not cover the raw form before it")
			}
			for _, parse := range []func([]byte) (*repository.Segment, error){
				func(r []byte) (*repository.Segment, error) { return repository.ParseSegment(bytes.NewReader(r)) },
				repository.ParseSegmentBytes,
			} {
				s, err := parse(raw)
				if err != nil || s.Format != repository.SegmentFormat || len(s.Revisions) != 2 {
					t.Errorf("parse: %+v, %v", s, err)
				}
			}
		})
	}
}

// TestUntrustedSegments plants a segment inside a window, with
// lifeboat's own code but without the signing key (unsigned, or signed by
// another key), or alters a signed one (one byte of its raw form changed,
// its sha256 made right again, re-encoded): ReadSegment, ReadSegmentRaw,
// VerifyChanges, ChainHash and Compact refuse it as an *UntrustedError
// naming it; verify --changes ends the verified run before it; the
// segments before it still read. A flipped byte without a new sha256 is
// damage (ErrBadSegment), refused too.
func TestUntrustedSegments(t *testing.T) {
	ctx := t.Context()
	key, attacker := newKey(t), newKey(t)
	ranges := [][2]int64{{11, 12}, {13, 14}, {15, 16}, {17, 18}}
	const planted = 2
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, prev string, snapRev int64)
		why   error // nil: damage, not an untrusted signature
	}{
		{"unsigned", func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, prev string, snapRev int64) {
			replaceSegment(t, b, nil, si, prev, snapRev)
		}, signing.ErrUnsigned},
		{"another key", func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, prev string, snapRev int64) {
			replaceSegment(t, b, attacker, si, prev, snapRev)
		}, signing.ErrUnknownKey},
		{"altered after signing", func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, _ string, _ int64) {
			raw := rawOf(t, b.Store, si.Object.Key)
			i := bytes.LastIndex(raw, []byte("value"))
			raw[i] = 'V'
			end := len(raw) - 72 - sha256.Size
			sum := sha256.Sum256(raw[:end])
			copy(raw[end:], sum[:])
			storeRaw(t, b.Store, si.Object.Key, raw)
		}, signing.ErrBadSignature},
		{"signature flipped", func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, _ string, _ int64) {
			raw := rawOf(t, b.Store, si.Object.Key)
			raw[len(raw)-1] ^= 1
			storeRaw(t, b.Store, si.Object.Key, raw)
		}, signing.ErrBadSignature},
		{"key id flipped", func(t *testing.T, b *repository.Repo, si repository.SegmentInfo, _ string, _ int64) {
			raw := rawOf(t, b.Store, si.Object.Key)
			raw[len(raw)-72] ^= 1
			storeRaw(t, b.Store, si.Object.Key, raw)
		}, signing.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := signedAs(dirBackups(t, t.TempDir()), key)
			m := jobtest.PutBackup(t, b, segT0, uploader.PutOptions{}, true)
			s := m.Revision
			var rs [][2]int64
			for _, r := range ranges {
				rs = append(rs, [2]int64{s + r[0] - 10, s + r[1] - 10})
			}
			segs := putSignedChain(t, b, m.ID, s, rs, []*signing.Key{key, key, key, key})
			prevHash, err := b.StoredHash(ctx, segs[planted-1].Object.Key)
			if err != nil {
				t.Fatal(err)
			}
			victim := segs[planted]
			tc.plant(t, b, victim, prevHash, s)

			r := trusting(b, false, key)
			_, _, err = r.ReadSegment(ctx, victim, nil)
			wantUntrusted(t, "ReadSegment", err, victim.Object.Key, tc.why)
			_, _, _, err = r.ReadSegmentRaw(ctx, victim, nil)
			wantUntrusted(t, "ReadSegmentRaw", err, victim.Object.Key, tc.why)
			_, _, _, err = r.ReadSegmentRawInto(ctx, victim, nil, make([]byte, 0, 1024))
			wantUntrusted(t, "ReadSegmentRawInto", err, victim.Object.Key, tc.why)
			for _, si := range segs[:planted] {
				if _, _, err := r.ReadSegment(ctx, si, nil); err != nil {
					t.Errorf("ReadSegment %s before the plant: %v", si.Object.Key, err)
				}
				if _, _, _, err := r.ReadSegmentRaw(ctx, si, nil); err != nil {
					t.Errorf("ReadSegmentRaw %s before the plant: %v", si.Object.Key, err)
				}
			}

			ws := windows(t, r)
			if len(ws) != 1 || !ws[0].Recoverable() {
				t.Fatalf("windows: %+v", ws)
			}
			c, err := r.VerifyChanges(ctx, ws[0], nil)
			if err != nil {
				t.Fatal(err)
			}
			wantUntrusted(t, "verify --changes", c.Problem, victim.Object.Key, tc.why)
			if c.ProblemKey != victim.Object.Key || c.Through != segs[planted-1].Last || c.Segments != planted {
				t.Errorf("verify --changes: problem at %s, verified through %d (%d segments); want at %s, through %d (%d)",
					c.ProblemKey, c.Through, c.Segments, victim.Object.Key, segs[planted-1].Last, planted)
			}

			// Compaction refuses to merge it.
			step := repository.CompactStep{Generation: m.ID, Level: 1, Bucket: segT0, Sources: segs}
			compactor := trusting(b, false, key)
			compactor.Signer = key
			_, err = compactor.Compact(ctx, step, repository.CompactPolicy{Levels: []time.Duration{time.Minute}}, repository.Encoding{Compression: "zstd"}, nil)
			wantUntrusted(t, "Compact", err, victim.Object.Key, tc.why)
			if got, _, _ := b.ListSegments(ctx, m.ID); len(got) != len(segs) {
				t.Errorf("%d segments after the refused compaction, want %d (nothing stored)", len(got), len(segs))
			}

			// Without trust configured, only damage is refused.
			plain := repository.New(b.Store, b.Cluster)
			if _, _, err := plain.ReadSegment(ctx, victim, nil); errors.Is(err, repository.ErrUntrusted) {
				t.Errorf("ReadSegment without trust: %v", err)
			}
		})
	}

	t.Run("damaged after signing", func(t *testing.T) {
		b := signedAs(dirBackups(t, t.TempDir()), key)
		m := jobtest.PutBackup(t, b, segT0, uploader.PutOptions{}, true)
		segs := putSignedChain(t, b, m.ID, m.Revision, [][2]int64{{m.Revision + 1, m.Revision + 2}}, []*signing.Key{key})
		raw := rawOf(t, b.Store, segs[0].Object.Key)
		raw[bytes.LastIndex(raw, []byte("value"))] = 'V'
		storeRaw(t, b.Store, segs[0].Object.Key, raw)
		r := trusting(b, false, key)
		if _, _, err := r.ReadSegment(ctx, segs[0], nil); !errors.Is(err, repository.ErrBadSegment) {
			t.Errorf("ReadSegment: %v, want ErrBadSegment", err)
		}
		// ReadSegmentRaw checks the signature over the sha256 it ends
		// with; the parse of the raw form finds the content does not
		// match it.
		raw2, _, _, err := r.ReadSegmentRaw(ctx, segs[0], nil)
		if err == nil {
			_, err = repository.ParseSegmentBytes(raw2)
		}
		if !errors.Is(err, repository.ErrBadSegment) {
			t.Errorf("ReadSegmentRaw + ParseSegmentBytes: %v, want ErrBadSegment", err)
		}
		c := verifyOne(t, r, m.ID)
		if !errors.Is(c.Problem, repository.ErrBadSegment) || c.ProblemKey != segs[0].Object.Key {
			t.Errorf("verify --changes: %v at %s", c.Problem, c.ProblemKey)
		}
	})
}

// replaceSegment deletes the segment at si and stores in its place one
// with the same header and other values, signed by k (nil: unsigned),
// as someone with the store's credentials could with lifeboat's code.
func replaceSegment(t *testing.T, b *repository.Repo, k *signing.Key, si repository.SegmentInfo, prev string, snapRev int64) {
	t.Helper()
	if err := b.Store.Delete(t.Context(), si.Object.Key); err != nil {
		t.Fatal(err)
	}
	s := chainSegment(si.Generation, snapRev, si.First, si.Last, prev)
	for i := range s.Revisions {
		s.Revisions[i].Ops[0].Value = []byte("planted")
	}
	if _, _, err := signedAs(b, k).PutSegment(t.Context(), s, repository.Encoding{Compression: "zstd"}); err != nil {
		t.Fatal(err)
	}
}

// TestSegmentKeyRotation: segments signed by two keys, both trusted, read
// and verify as one chain; a reader that trusts only the new key stops at
// the first old one; with AllowUnsigned, segments written before signing
// read (and one signed by an unknown key is still refused).
func TestSegmentKeyRotation(t *testing.T) {
	ctx := t.Context()
	old, cur, unknown := newKey(t), newKey(t), newKey(t)
	for _, tc := range []struct {
		name    string
		signers []*signing.Key
		reader  func(b *repository.Repo) *repository.Repo
		trusted []bool // each segment, as ReadSegment and ReadSegmentRaw find it
		through int    // index of the last verified segment, -1 for none
		why     error  // nil when the chain is sound
	}{
		{"both keys trusted", []*signing.Key{old, old, cur, cur}, func(b *repository.Repo) *repository.Repo { return trusting(b, false, old, cur) },
			[]bool{true, true, true, true}, 3, nil},
		{"old key no longer trusted", []*signing.Key{old, old, cur, cur}, func(b *repository.Repo) *repository.Repo { return trusting(b, false, cur) },
			[]bool{false, false, true, true}, -1, signing.ErrUnknownKey},
		{"unsigned before signing, allowed", []*signing.Key{nil, nil, cur, cur}, func(b *repository.Repo) *repository.Repo { return trusting(b, true, cur) },
			[]bool{true, true, true, true}, 3, nil},
		{"unsigned before signing, not allowed", []*signing.Key{nil, nil, cur, cur}, func(b *repository.Repo) *repository.Repo { return trusting(b, false, cur) },
			[]bool{false, false, true, true}, -1, signing.ErrUnsigned},
		{"allow unsigned still refuses an unknown key", []*signing.Key{nil, cur, unknown, cur}, func(b *repository.Repo) *repository.Repo { return trusting(b, true, cur) },
			[]bool{true, true, false, true}, 1, signing.ErrUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := dirBackups(t, t.TempDir())
			m := jobtest.PutBackup(t, signedAs(b, cur), segT0, uploader.PutOptions{}, true)
			s := m.Revision
			segs := putSignedChain(t, b, m.ID, s, [][2]int64{{s + 1, s + 2}, {s + 3, s + 3}, {s + 4, s + 6}, {s + 7, s + 7}}, tc.signers)
			r := tc.reader(b)
			for i, si := range segs {
				_, _, err := r.ReadSegment(ctx, si, nil)
				_, _, _, rerr := r.ReadSegmentRaw(ctx, si, nil)
				if tc.trusted[i] != (err == nil) || tc.trusted[i] != (rerr == nil) {
					t.Errorf("segment %d (%s): ReadSegment %v, ReadSegmentRaw %v; want trusted %v", i, si.Object.Key, err, rerr, tc.trusted[i])
				}
				if err != nil {
					wantUntrusted(t, "ReadSegment", err, si.Object.Key, tc.why)
				}
			}
			c := verifyOne(t, r, m.ID)
			wantThrough := s
			if tc.through >= 0 {
				wantThrough = segs[tc.through].Last
			}
			if c.Through != wantThrough {
				t.Errorf("verify --changes through %d, want %d (%v)", c.Through, wantThrough, c.Problem)
			}
			if tc.why == nil {
				if c.Problem != nil {
					t.Errorf("verify --changes: %v", c.Problem)
				}
				return
			}
			wantUntrusted(t, "verify --changes", c.Problem, segs[tc.through+1].Object.Key, tc.why)
		})
	}
}

// TestCompactSigned: a compactor with a signing key stores signed
// compacted segments (format 4) that a trusting reader reads and
// verifies, through DeleteReplaced; a compacted segment planted unsigned
// at the name a compaction would take is refused by readers, shadows the
// window until it is gone, and is never adopted by the compactor.
func TestCompactSigned(t *testing.T) {
	ctx := t.Context()
	key := newKey(t)
	base := dirBackups(t, t.TempDir())
	w := signedAs(base, key)
	m := jobtest.PutBackup(t, w, segT0, uploader.PutOptions{}, true)
	s := m.Revision
	segs := putSignedChain(t, base, m.ID, s, [][2]int64{{s + 1, s + 2}, {s + 3, s + 4}, {s + 5, s + 6}, {s + 7, s + 8}}, []*signing.Key{key, key, key, key})
	compactor := trusting(base, false, key)
	compactor.Signer = key
	step := repository.CompactStep{Generation: m.ID, Level: 1, Bucket: segT0, Sources: segs[:3]}
	p := repository.CompactPolicy{Levels: []time.Duration{time.Minute}}
	enc := repository.Encoding{Compression: "zstd"}

	// Planted first: the same step by someone without the key.
	planted, err := signedAs(base, nil).Compact(ctx, step, p, enc, nil)
	if err != nil || len(planted) != 1 {
		t.Fatalf("unsigned Compact: %+v, %v", planted, err)
	}
	if raw := rawOf(t, base.Store, planted[0].Object.Key); raw[7] != repository.CompactedFormat {
		t.Errorf("unsigned compacted segment: format byte %d, want %d", raw[7], repository.CompactedFormat)
	}
	_, _, err = compactor.ReadSegment(ctx, planted[0], nil)
	wantUntrusted(t, "ReadSegment of a planted compacted segment", err, planted[0].Object.Key, signing.ErrUnsigned)
	_, err = compactor.ChainHash(ctx, planted[0], nil)
	wantUntrusted(t, "ChainHash of a planted compacted segment", err, planted[0].Object.Key, signing.ErrUnsigned)
	_, err = compactor.Compact(ctx, step, p, enc, nil)
	wantUntrusted(t, "Compact over a planted compacted segment", err, planted[0].Object.Key, signing.ErrUnsigned)
	win := windows(t, compactor)[0]
	if win.Segments[0].Object.Key != planted[0].Object.Key {
		t.Fatalf("window's run starts at %s, want the planted compacted segment (names alone pick it)", win.Segments[0].Object.Key)
	}
	c, err := compactor.VerifyChanges(ctx, win, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantUntrusted(t, "verify --changes", c.Problem, planted[0].Object.Key, signing.ErrUnsigned)
	if c.Through != s {
		t.Errorf("verify --changes through %d, want %d (nothing before the planted segment)", c.Through, s)
	}
	if _, err := compactor.DeleteReplaced(ctx, win.Segments[0], win.Superseded, nil); !errors.Is(err, repository.ErrUntrusted) {
		t.Errorf("DeleteReplaced by a planted compacted segment: %v, want ErrUntrusted", err)
	}
	if got, _, _ := base.ListSegments(ctx, m.ID); len(got) != 5 {
		t.Fatalf("%d segments after DeleteReplaced was refused, want 5", len(got))
	}

	// Gone, the compactor signs its own.
	if err := base.Store.Delete(ctx, planted[0].Object.Key); err != nil {
		t.Fatal(err)
	}
	out, err := compactor.Compact(ctx, step, p, enc, nil)
	if err != nil || len(out) != 1 {
		t.Fatalf("signed Compact: %+v, %v", out, err)
	}
	if raw := rawOf(t, base.Store, out[0].Object.Key); raw[7] != repository.CompactedFormat+2 {
		t.Errorf("signed compacted segment: format byte %d, want %d", raw[7], repository.CompactedFormat+2)
	}
	reader := trusting(base, false, key)
	got, _, err := reader.ReadSegment(ctx, out[0], nil)
	if err != nil || got.Level != 1 || got.First != s+1 || got.Last != s+6 {
		t.Fatalf("ReadSegment of the signed compacted segment: %+v, %v", got, err)
	}
	if h, err := reader.ChainHash(ctx, out[0], nil); err != nil || h != got.EndHash {
		t.Errorf("ChainHash: %s, %v; want %s", h, err, got.EndHash)
	}
	win = windows(t, reader)[0]
	if c, err := reader.VerifyChanges(ctx, win, nil); err != nil || c.Problem != nil || c.Through != s+8 {
		t.Fatalf("verify --changes after signed compaction: through %d, %v, %v", c.Through, c.Problem, err)
	}
	if n, err := compactor.DeleteReplaced(ctx, win.Segments[0], win.Superseded, nil); err != nil || n != 3 {
		t.Fatalf("DeleteReplaced: %d, %v; want 3", n, err)
	}
	if c, err := reader.VerifyChanges(ctx, windows(t, reader)[0], nil); err != nil || c.Problem != nil || c.Through != s+8 {
		t.Fatalf("verify --changes after DeleteReplaced: through %d, %v, %v", c.Through, c.Problem, err)
	}
}

// TestSignedSegmentEncrypted: signing and checking work under age too
// (the signature is inside the encryption, over the raw form).
func TestSignedSegmentEncrypted(t *testing.T) {
	ctx := t.Context()
	key := newKey(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	b := signedAs(dirBackups(t, t.TempDir()), key)
	enc := repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}}
	s := chainSegment("20261201T090000Z-r10", 10, 11, 13, "")
	if _, _, err := b.PutSegment(ctx, s, enc); err != nil {
		t.Fatal(err)
	}
	segs, _, err := b.ListSegments(ctx, s.Generation)
	if err != nil || len(segs) != 1 {
		t.Fatal(segs, err)
	}
	r := trusting(b, false, key)
	if _, _, err := r.ReadSegment(ctx, segs[0], []age.Identity{id}); err != nil {
		t.Errorf("ReadSegment: %v", err)
	}
	if _, _, _, err := r.ReadSegmentRaw(ctx, segs[0], []age.Identity{id}); err != nil {
		t.Errorf("ReadSegmentRaw: %v", err)
	}
	_, _, err = trusting(b, false, newKey(t)).ReadSegment(ctx, segs[0], []age.Identity{id})
	wantUntrusted(t, "ReadSegment by a reader of another key", err, segs[0].Object.Key, signing.ErrUnknownKey)
}
