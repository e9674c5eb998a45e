package verify_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/lifeboat-dev/lifeboat/verify"
)

// snapshotBytes returns a fake snapshot stream: size database bytes followed
// by their sha256.
func snapshotBytes(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, size, size+sha256.Size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	sum := sha256.Sum256(b)
	return append(b, sum[:]...)
}

// writeSplit writes data to a new TrailerHash in pieces cut at cuts
// (ascending offsets) and checks it.
func writeSplit(data []byte, cuts ...int) (string, int64, error) {
	h := verify.NewTrailerHash()
	prev := 0
	for _, c := range append(cuts, len(data)) {
		if n, err := h.Write(data[prev:c]); n != c-prev || err != nil {
			panic("TrailerHash.Write failed")
		}
		prev = c
	}
	digest, err := h.Check()
	return digest, h.Size(), err
}

// TestTrailerHashSplitPoints writes a stream in two and in three pieces cut
// at every offset within 40 bytes of the trailer's start and of the end, so
// every way a write can straddle the 32-byte trailer is taken, and on a
// good, a flipped-data and a flipped-trailer stream.
func TestTrailerHashSplitPoints(t *testing.T) {
	good := snapshotBytes(2*512, 11)
	want := hex.EncodeToString(good[len(good)-sha256.Size:])
	flippedData := bytes.Clone(good)
	flippedData[len(good)-sha256.Size-1] ^= 1 // the last database byte
	flippedTrailer := bytes.Clone(good)
	flippedTrailer[len(good)-sha256.Size] ^= 1 // the first trailer byte
	start := len(good) - sha256.Size
	var points []int
	for _, c := range []int{start, len(good)} {
		for d := -40; d <= 40; d++ {
			if p := c + d; p >= 0 && p <= len(good) {
				points = append(points, p)
			}
		}
	}
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{name: "good", data: good},
		{name: "last database byte flipped", data: flippedData, wantErr: true},
		{name: "first trailer byte flipped", data: flippedTrailer, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check := func(cuts ...int) {
				t.Helper()
				got, size, err := writeSplit(tt.data, cuts...)
				if size != int64(len(tt.data)) {
					t.Fatalf("cuts %v: Size = %d, want %d", cuts, size, len(tt.data))
				}
				if tt.wantErr {
					var te *verify.TrailerError
					if !errors.As(err, &te) || !errors.Is(err, verify.ErrCorrupt) || te.Trailer == nil {
						t.Fatalf("cuts %v: Check = %q, %v; want a trailer mismatch", cuts, got, err)
					}
					sum := sha256.Sum256(tt.data[:start])
					if !bytes.Equal(te.Sum, sum[:]) || !bytes.Equal(te.Trailer, tt.data[start:]) {
						t.Fatalf("cuts %v: mismatch reports sum %x trailer %x", cuts, te.Sum, te.Trailer)
					}
					return
				}
				if err != nil || got != want {
					t.Fatalf("cuts %v: Check = %q, %v; want %s", cuts, got, err, want)
				}
			}
			for _, a := range points {
				check(a)
				for _, b := range points {
					if b >= a {
						check(a, b)
					}
				}
			}
		})
	}
}

func TestTrailerHashSplits(t *testing.T) {
	data := snapshotBytes(3*4096, 1)
	want := hex.EncodeToString(data[len(data)-sha256.Size:])
	tests := []struct {
		name   string
		splits func(r *rand.Rand) int
	}{
		{name: "one byte at a time", splits: func(*rand.Rand) int { return 1 }},
		{name: "31 bytes", splits: func(*rand.Rand) int { return 31 }},
		{name: "32 bytes", splits: func(*rand.Rand) int { return 32 }},
		{name: "33 bytes", splits: func(*rand.Rand) int { return 33 }},
		{name: "4096 bytes", splits: func(*rand.Rand) int { return 4096 }},
		{name: "whole", splits: func(*rand.Rand) int { return len(data) }},
		{name: "random small", splits: func(r *rand.Rand) int { return 1 + r.IntN(40) }},
		{name: "random large", splits: func(r *rand.Rand) int { return 1 + r.IntN(9000) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(2, 3))
			var cuts []int
			for off := tt.splits(r); off < len(data); off += tt.splits(r) {
				cuts = append(cuts, off)
			}
			got, _, err := writeSplit(data, cuts...)
			if err != nil {
				t.Fatalf("Check: %v", err)
			}
			if got != want {
				t.Errorf("sha256 = %s, want %s", got, want)
			}
		})
	}
}

func TestTrailerHashErrors(t *testing.T) {
	good := snapshotBytes(4096, 4)
	flipped := bytes.Clone(good)
	flipped[100] ^= 1
	badTrailer := bytes.Clone(good)
	badTrailer[len(badTrailer)-1] ^= 0x80
	emptyDB := sha256.Sum256(nil)
	tests := []struct {
		name     string
		data     []byte
		mismatch bool // a trailer is there but wrong; else the size rules one out
		wantMsg  string
	}{
		{name: "empty", data: nil, wantMsg: "no sha256 trailer (size 0 is not 32 modulo 512)"},
		{name: "shorter than a trailer", data: good[:20], wantMsg: "no sha256 trailer"},
		{name: "no trailer", data: good[:4096], wantMsg: "no sha256 trailer"},
		{name: "cut mid-way", data: good[:1000], wantMsg: "no sha256 trailer"},
		{name: "only the trailer of an empty database", data: emptyDB[:], wantMsg: "empty database before the sha256 trailer"},
		{name: "cut at sector plus 32", data: good[:512+32], mismatch: true, wantMsg: "sha256 trailer mismatch"},
		{name: "flipped data byte", data: flipped, mismatch: true, wantMsg: "sha256 trailer mismatch"},
		{name: "flipped trailer byte", data: badTrailer, mismatch: true, wantMsg: "sha256 trailer mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := writeSplit(tt.data)
			var te *verify.TrailerError
			if !errors.As(err, &te) || !errors.Is(err, verify.ErrCorrupt) {
				t.Fatalf("Check error = %v, want a *TrailerError wrapping ErrCorrupt", err)
			}
			if got := te.Trailer != nil; got != tt.mismatch {
				t.Errorf("mismatch = %v, want %v (%v)", got, tt.mismatch, err)
			}
			if te.Size != int64(len(tt.data)) {
				t.Errorf("Size = %d, want %d", te.Size, len(tt.data))
			}
			if !bytes.Contains([]byte(err.Error()), []byte(tt.wantMsg)) {
				t.Errorf("error %q lacks %q", err, tt.wantMsg)
			}
		})
	}
}

// FuzzTrailerHash: in any chunking, a stream passes exactly when it is a
// non-empty database of whole sectors followed by its sha256, and the
// result agrees with TrailerReader's.
func FuzzTrailerHash(f *testing.F) {
	f.Add([]byte("hello"), uint64(1))
	f.Add(snapshotBytes(512, 5), uint64(7))
	f.Add(snapshotBytes(1024, 6), uint64(31))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		r := rand.New(rand.NewPCG(seed, seed))
		var cuts []int
		for off := 1 + r.IntN(70); off < len(data); off += 1 + r.IntN(70) {
			cuts = append(cuts, off)
		}
		got, _, err := writeSplit(data, cuts...)
		valid := len(data) > sha256.Size && len(data)%512 == sha256.Size
		if valid {
			sum := sha256.Sum256(data[:len(data)-sha256.Size])
			valid = string(sum[:]) == string(data[len(data)-sha256.Size:])
		}
		switch {
		case valid && err != nil:
			t.Fatalf("valid stream rejected: %v", err)
		case !valid && !errors.Is(err, verify.ErrCorrupt):
			t.Fatalf("invalid stream accepted (err %v)", err)
		case valid && got != hex.EncodeToString(data[len(data)-sha256.Size:]):
			t.Fatalf("sha256 = %s, want the trailer", got)
		}
		want, _, wantErr := verify.TrailerReader(t.Context(), bytes.NewReader(data))
		if got != want || (err == nil) != (wantErr == nil) {
			t.Fatalf("TrailerHash = %q, %v; TrailerReader = %q, %v", got, err, want, wantErr)
		}
	})
}

// BenchmarkTrailerHash hashes a 64 MiB fake snapshot in 1 MiB writes, as
// the snapshot stream's sink and Fetch do.
func BenchmarkTrailerHash(b *testing.B) {
	data := snapshotBytes(64<<20, 9)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		h := verify.NewTrailerHash()
		for rest := data; len(rest) > 0; {
			n := min(1<<20, len(rest))
			h.Write(rest[:n])
			rest = rest[n:]
		}
		if _, err := h.Check(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTrailerReader checks the trailer of a 64 MiB fake snapshot in
// memory.
func BenchmarkTrailerReader(b *testing.B) {
	data := snapshotBytes(64<<20, 9)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, _, err := verify.TrailerReader(b.Context(), bytes.NewReader(data)); err != nil {
			b.Fatal(err)
		}
	}
}
