package backup

import (
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkSpoolCRC is the verified side of the pipeline's checksum: one
// sequential crc32c pass over a spool file in the page cache (MB/s; s/GB
// is 1000/MB/s).
func BenchmarkSpoolCRC(b *testing.B) {
	const size = 64 << 20
	f, err := os.Create(filepath.Join(b.TempDir(), "spool"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if _, err := io.CopyN(f, rand.Reader, size); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	for b.Loop() {
		if _, err := spoolCRC(b.Context(), f, size); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFeedCRC is the encoder side: crc32c over the tail's 1 MiB
// buffers on their way to the encoder.
func BenchmarkFeedCRC(b *testing.B) {
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	w := &crcWriter{w: io.Discard}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		w.Write(buf)
	}
}
