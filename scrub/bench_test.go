package scrub_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/restoretest"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/scrub"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// putEncrypted stores a synthetic backup of size bytes encrypted to id.
func putEncrypted(b *testing.B, repo *repository.Repo, id *age.X25519Identity, at time.Time, size int) {
	b.Helper()
	m := jobtest.PutObject(b, repo, at, uploader.PutOptions{})
	if err := repo.Store.Delete(b.Context(), m.Object); err != nil {
		b.Fatal(err)
	}
	var buf bytes.Buffer
	w, err := age.Encrypt(&buf, id.Recipient())
	if err != nil {
		b.Fatal(err)
	}
	_, _ = w.Write(storetest.Data(uint64(at.Unix()), size))
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
	sum := sha256.Sum256(buf.Bytes())
	m.Object = repo.ObjectKey(m.ID, repository.Encoding{Compression: "none", Recipients: []age.Recipient{id.Recipient()}})
	m.ObjectSize, m.ObjectSHA256, m.Encryption, m.Recipients = int64(buf.Len()), hex.EncodeToString(sum[:]), "age", []string{id.Recipient().String()}
	if _, err := repo.Store.Put(b.Context(), m.Object, &buf, uploader.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := repo.PutManifest(b.Context(), m); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkScrub: a run over a directory store of encrypted backups,
// headers only (read_data 0, the every-run cost per object) and every
// byte read in full (read_data 100, the throughput of the full reads).
func BenchmarkScrub(b *testing.B) {
	for _, tc := range []struct {
		name          string
		backups, size int
		readData      float64
	}{
		{"headers/200x64KiB", 200, 64 << 10, 0},
		{"full/16x4MiB", 16, 4 << 20, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			repo := restoretest.DirRepo(b, b.TempDir())
			id := restoretest.NewIdentity(b)
			start := time.Now().Add(-time.Duration(tc.backups) * time.Hour)
			for i := range tc.backups {
				putEncrypted(b, repo, id, start.Add(time.Duration(i)*time.Hour), tc.size)
			}
			job := scrub.Job{Repo: repo, Identities: []age.Identity{id}, ReadData: tc.readData, DryRun: true}
			lg := slog.New(slog.DiscardHandler)
			var read int64
			b.ResetTimer()
			for range b.N {
				res, err := scrub.Run(b.Context(), job, lg)
				if err != nil || !res.Sound() {
					b.Fatalf("%+v, %v", res, err)
				}
				read = res.BytesRead
			}
			b.SetBytes(read)
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(2*tc.backups), "µs/object")
		})
	}
}
