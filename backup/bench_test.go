package backup

import (
	"crypto/rand"
	"io"
	"testing"
)

// BenchmarkFeedCRC is the pipeline's checksum: crc32c over 1 MiB buffers,
// as the stream's (spoolProgress) and the encoder's feed (crcWriter) take
// it (MB/s; s/GB is 1000/MB/s).
func BenchmarkFeedCRC(b *testing.B) {
	buf := make([]byte, 1<<20)
	rand.Read(buf)
	w := &crcWriter{w: io.Discard}
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		w.Write(buf)
	}
}
