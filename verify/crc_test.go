package verify

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

func TestCRCCombine(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range [][2]int{{0, 0}, {0, 1}, {1, 0}, {3, 5}, {100, 4096}, {4096, 17}, {70000, 12345}} {
		a, b := make([]byte, n[0]), make([]byte, n[1])
		for i := range a {
			a[i] = byte(rng.Uint32())
		}
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		start := rng.Uint32() // any running crc, as in the bolt hash
		want := crc32.Update(crc32.Update(start, castagnoli, a), castagnoli, b)
		got := crcCombine(crc32.Update(start, castagnoli, a), crc32.Update(0, castagnoli, b), int64(len(b)))
		if got != want {
			t.Errorf("crcCombine for %d+%d bytes = %08x, want %08x", n[0], n[1], got, want)
		}
	}
}

func FuzzCRCCombine(f *testing.F) {
	f.Add(uint32(0), []byte("key"), []byte("value"))
	f.Fuzz(func(t *testing.T, start uint32, a, b []byte) {
		want := crc32.Update(crc32.Update(start, castagnoli, a), castagnoli, b)
		if got := crcCombine(crc32.Update(start, castagnoli, a), crc32.Update(0, castagnoli, b), int64(len(b))); got != want {
			t.Fatalf("crcCombine = %08x, want %08x", got, want)
		}
	})
}
