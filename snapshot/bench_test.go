package snapshot_test

import (
	"context"
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"testing"

	clientsnapshot "go.etcd.io/etcd/client/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/snapshot"
)

// BenchmarkTake compares Take (member choice, sha256 checked in flight,
// incremental writeback, fsync) with what etcdctl snapshot save does
// (client/v3/snapshot SaveWithVersion: io.Copy into a .part file, fsync,
// rename; no integrity check), on the same seeded single-member cluster with
// about 20k Kubernetes-like keys (a database of about 80 MB).
//
//   - lifeboat: Take with the default options.
//   - lifeboat-nowriteback: Take with Chunk -1 (plain writes, one big fsync).
//   - etcdctl: the baseline.
//   - etcdctl+sha256: the baseline followed by reading the file back to check
//     the trailer, which is what it takes to get Take's guarantee.
func BenchmarkTake(b *testing.B) {
	c := etcdtest.Start(b, etcdtest.Options{Members: 1})
	res, err := seed.Kubernetes(context.Background(), c.Client(b), seed.Options{Objects: 20000, Seed: 1})
	if err != nil {
		b.Fatalf("seed: %v", err)
	}
	cfg := configFor(c)
	dir := b.TempDir()
	cc := c.ClientConfig()
	cc.Endpoints = cc.Endpoints[:1]

	take := func(opts snapshot.Options) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			for b.Loop() {
				spool := filepath.Join(dir, "take.db")
				info, err := take(b.Context(), cfg, spool, nil, opts, nil)
				if err != nil {
					b.Fatalf("Take: %v", err)
				}
				size = info.Size
				if err := os.Remove(spool); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ReportMetric(float64(res.Keys), "keys")
		}
	}
	etcdctl := func(check bool) func(b *testing.B) {
		return func(b *testing.B) {
			b.ReportAllocs()
			var size int64
			for b.Loop() {
				path := filepath.Join(dir, "etcdctl.db")
				if _, err := clientsnapshot.SaveWithVersion(b.Context(), zap.NewNop(), cc, path); err != nil {
					b.Fatalf("SaveWithVersion: %v", err)
				}
				st, err := os.Stat(path)
				if err != nil {
					b.Fatal(err)
				}
				size = st.Size()
				if check {
					checkTrailer(b, path, size)
				}
				if err := os.Remove(path); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(size)
			b.ReportMetric(float64(res.Keys), "keys")
		}
	}
	b.Run("lifeboat", take(snapshot.Options{}))
	b.Run("lifeboat-nowriteback", take(snapshot.Options{Chunk: -1}))
	b.Run("etcdctl", etcdctl(false))
	b.Run("etcdctl+sha256", etcdctl(true))
}

// checkTrailer reads a snapshot file back and compares its sha256 with the
// trailer.
func checkTrailer(b *testing.B, path string, size int64) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.CopyN(h, f, size-sha256.Size); err != nil {
		b.Fatal(err)
	}
	trailer := make([]byte, sha256.Size)
	if _, err := io.ReadFull(f, trailer); err != nil {
		b.Fatal(err)
	}
	if string(h.Sum(nil)) != string(trailer) {
		b.Fatal("trailer mismatch")
	}
}
