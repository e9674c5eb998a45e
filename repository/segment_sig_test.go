package repository

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"testing"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// fuzzSigKey is a fixed signing key, so that signed fuzz seeds are the
// same from run to run; fuzzSigAt the object key they are signed for.
func fuzzSigKey(t testing.TB) *signing.Key {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{7}, ed25519.SeedSize)))
	if err != nil {
		t.Fatal(err)
	}
	k, err := signing.ParseKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

const fuzzSigAt = "prod/changes/g/00000000000000000101-00000000000000000103.seg.zst"

// encodeSignedRaw returns s's raw form signed by k for key at.
func encodeSignedRaw(t testing.TB, s *Segment, k *signing.Key, at string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := encodeSegmentSigned(&buf, s, &segmentSigner{key: k, at: at}); err != nil {
		t.Fatalf("encode signed: %v", err)
	}
	return buf.Bytes()
}

// signedSeeds are the small segment cases, raw and signed by
// fuzzSigKey for fuzzSigAt (formats 3 and 4).
func signedSeeds(t testing.TB) [][]byte {
	k := fuzzSigKey(t)
	var out [][]byte
	for _, s := range segmentCases() {
		if raw := encodeSignedRaw(t, s, k, fuzzSigAt); len(raw) <= 64<<10 {
			out = append(out, raw)
		}
	}
	return out
}

// trustedSeal parses data and checks its seal as a Repo trusting k does
// for a segment stored at fuzzSigAt.
func trustedSeal(k *signing.Key, data []byte) (*Segment, error) {
	s, seal, err := parseSegmentSealed(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	r := &Repo{Trust: &signing.Trust{Keys: []signing.PublicKey{k.Public()}}}
	if err := r.checkSegment(fuzzSigAt, seal); err != nil {
		return nil, err
	}
	return s, nil
}

// TestSignedSegmentDamage: a signed segment with any one byte flipped,
// or cut short anywhere, is refused by a reader that trusts its key
// (ErrBadSegment, or an untrusted signature); so is the unchanged one
// read as stored at another key, or by a reader trusting another key.
func TestSignedSegmentDamage(t *testing.T) {
	k := fuzzSigKey(t)
	for _, raw := range signedSeeds(t) {
		if _, err := trustedSeal(k, raw); err != nil {
			t.Fatalf("intact signed segment: %v", err)
		}
		if _, err := ParseSegmentBytes(bytes.Clone(raw)); err != nil {
			t.Fatalf("ParseSegmentBytes of a signed segment: %v", err)
		}
		for i := range raw {
			bad := bytes.Clone(raw)
			bad[i] ^= 0x01
			if _, err := trustedSeal(k, bad); err == nil {
				t.Fatalf("byte %d of %d flipped: accepted", i, len(raw))
			} else if !errors.Is(err, ErrBadSegment) && !errors.Is(err, ErrUntrusted) {
				t.Fatalf("byte %d flipped: %v, want ErrBadSegment or ErrUntrusted", i, err)
			}
			if _, err := trustedSeal(k, raw[:i]); err == nil {
				t.Fatalf("cut at %d of %d: accepted", i, len(raw))
			}
		}
		_, seal, err := parseSegmentSealed(bytes.NewReader(raw))
		if err != nil {
			t.Fatal(err)
		}
		r := &Repo{Trust: &signing.Trust{Keys: []signing.PublicKey{k.Public()}}}
		if err := r.checkSegment(fuzzSigAt+".moved", seal); !errors.Is(err, signing.ErrBadSignature) {
			t.Errorf("signed segment at another key: %v, want ErrBadSignature", err)
		}
		other, err := signing.Generate()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := trustedSeal(other, raw); !errors.Is(err, signing.ErrUnknownKey) {
			t.Errorf("reader trusting another key: %v, want ErrUnknownKey", err)
		}
	}
}

// FuzzSignedSegment: parsing any input never panics, and whatever parses
// and carries a signature a reader trusting the seeds' key accepts for
// their object key is byte for byte one of the signed seeds (nothing but
// the signer makes a segment that verifies).
func FuzzSignedSegment(f *testing.F) {
	k := fuzzSigKey(f)
	seeds := signedSeeds(f)
	for _, raw := range seeds {
		f.Add(raw)
		flipped := bytes.Clone(raw)
		flipped[len(raw)/2] ^= 0x40
		f.Add(flipped)
		f.Add(raw[:len(raw)-1])
		f.Add(append(bytes.Clone(raw), 0))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := ParseSegmentBytes(bytes.Clone(data)); err != nil && !errors.Is(err, ErrBadSegment) {
			t.Fatalf("ParseSegmentBytes: error not ErrBadSegment: %v", err)
		}
		if _, err := trustedSeal(k, data); err != nil {
			return
		}
		for _, raw := range seeds {
			if bytes.Equal(raw, data) {
				return
			}
		}
		t.Fatalf("a segment that is not one the key signed verifies (%d bytes)", len(data))
	})
}
