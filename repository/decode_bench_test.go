package repository

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"testing"

	"filippo.io/age"
)

// BenchmarkDecode decodes a zstd+age object as a drill or a restore does,
// with the decoder's concurrency at 1 and at its default (min(4,
// GOMAXPROCS)), with and without the read-ahead below it.
// LIFEBOAT_BENCH_SNAPSHOT=file encodes that file (e.g. the bench's 1.1 GB
// snapshot); the default is 64 MiB of compressible bytes.
//
//	go test -run '^$' -bench Decode -benchmem ./repository
func BenchmarkDecode(b *testing.B) {
	var raw []byte
	if p := os.Getenv("LIFEBOAT_BENCH_SNAPSHOT"); p != "" {
		var err error
		if raw, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	} else {
		t := &testing.T{}
		raw = rawSnapshot(t, 64<<20)
	}
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	var enc bytes.Buffer
	w, err := NewEncoder(&enc, Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Write(raw); err != nil {
		b.Fatal(err)
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	obj := enc.Bytes()
	savedC, savedRA := decoderConcurrency, readAheadChunks
	b.Cleanup(func() { decoderConcurrency, readAheadChunks = savedC, savedRA })
	for _, c := range []struct{ concurrency, readAhead int }{{1, 0}, {1, 4}, {0, 0}} {
		b.Run(fmt.Sprintf("concurrency=%d/readahead=%d", c.concurrency, c.readAhead), func(b *testing.B) {
			decoderConcurrency, readAheadChunks = c.concurrency, c.readAhead
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(raw)))
			b.ResetTimer()
			for b.Loop() {
				r, err := NewDecoder(bytes.NewReader(obj), "zstd", "age", []age.Identity{id})
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.CopyBuffer(io.Discard, r, buf)
				r.Close()
				if err != nil || n != int64(len(raw)) {
					b.Fatalf("decoded %d bytes of %d: %v", n, len(raw), err)
				}
			}
		})
	}
}
