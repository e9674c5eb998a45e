package restore_test

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/lifeboat-dev/lifeboat/restore"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

func BenchmarkProbeDecodeLowmem(b *testing.B) {
	backups, m, _ := benchBackup(b)
	path := filepath.Join(benchFixture.dir, "store", filepath.FromSlash(m.Object))
	_ = backups
	b.SetBytes(m.DBSize)
	for range b.N {
		f, _ := os.Open(path)
		d, _ := uploader.NewDecoder(f, "zstd", "none", nil)
		io.Copy(io.Discard, d)
		d.Close()
		f.Close()
	}
}

func BenchmarkProbeDecodeFast(b *testing.B) {
	_, m, _ := benchBackup(b)
	path := filepath.Join(benchFixture.dir, "store", filepath.FromSlash(m.Object))
	b.SetBytes(m.DBSize)
	for range b.N {
		f, _ := os.Open(path)
		d, _ := zstd.NewReader(f, zstd.WithDecoderConcurrency(2))
		io.Copy(io.Discard, d)
		d.Close()
		f.Close()
	}
}

func BenchmarkProbeFetch(b *testing.B) {
	backups, m, _ := benchBackup(b)
	b.SetBytes(m.DBSize)
	for range b.N {
		dir := b.TempDir()
		if _, err := restore.Fetch(b.Context(), backups, m, filepath.Join(dir, "s.db"), restore.FetchOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProbeWrite(b *testing.B) {
	_, m, raw := benchBackup(b)
	b.SetBytes(m.DBSize)
	for range b.N {
		dir := b.TempDir()
		src, _ := os.Open(raw)
		dst, _ := os.Create(filepath.Join(dir, "x"))
		buf := make([]byte, 4<<20)
		io.CopyBuffer(struct{ io.Writer }{dst}, struct{ io.Reader }{src}, buf)
		dst.Close()
		src.Close()
	}
}
