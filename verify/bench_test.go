package verify_test

import (
	"os"
	"testing"

	"go.etcd.io/etcd/etcdutl/v3/snapshot"
	"go.uber.org/zap"

	"github.com/lifeboat-dev/lifeboat/internal/seed"
	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/verify"
)

// BenchmarkFile compares File with etcdutl's snapshot status (bbolt check,
// bolt hash, key count) and Trailer on the same snapshot: by default one
// taken from an embedded etcd seeded with 50k Kubernetes-like keys
// (compacted, with overwrites and deletes), or the snapshot file named by
// LIFEBOAT_BENCH_SNAPSHOT. The file is in the page cache after the first
// iteration. Peak memory differs more than time: etcdutl memory-maps the
// file, so its RSS grows by the file's size; File's stays small (measure
// with /usr/bin/time -v on `go test -c` output).
func BenchmarkFile(b *testing.B) {
	path := os.Getenv("LIFEBOAT_BENCH_SNAPSHOT")
	if path == "" {
		ctx := b.Context()
		c := etcdtest.Start(b, etcdtest.Options{})
		res, err := seed.Kubernetes(ctx, c.Client(b), seed.Options{Objects: 50000, Compact: true, Seed: 1})
		if err != nil {
			b.Fatalf("seed: %v", err)
		}
		path = saveSnapshot(b, ctx, c.ClientConfig(), c.Members[0].ClientURL, b.TempDir())
		b.Logf("snapshot of %d keys at revision %d", res.Keys, res.Revision)
	}
	fi, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	st, err := verify.File(b.Context(), path)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%s: %d bytes, %d keys, revision %d, compact revision %d", path, fi.Size(), st.TotalKeys, st.Revision, st.CompactRevision)

	b.Run("verify.File", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := verify.File(b.Context(), path); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("etcdutl.Status", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := snapshot.NewV3(zap.NewNop()).Status(path); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("verify.Trailer", func(b *testing.B) {
		b.SetBytes(fi.Size())
		for b.Loop() {
			if _, err := verify.Trailer(b.Context(), path); err != nil {
				b.Fatal(err)
			}
		}
	})
}
