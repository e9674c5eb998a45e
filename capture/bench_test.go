package capture

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"filippo.io/age"

	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/signing"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkFlush measures what one flush costs: a segment of 1 000
// revisions of Kubernetes-like 1–4 KiB values, encoded (zstd, then age)
// and stored in a directory store, unsigned and signed (a Repo with a
// signing key, issue 28: at most 2 % more). b.SetBytes is the raw size.
//
//	go test ./capture -run '^$' -bench BenchmarkFlush -count 6
func BenchmarkFlush(b *testing.B) {
	id, err := age.GenerateX25519Identity()
	if err != nil {
		b.Fatal(err)
	}
	key, err := signing.Generate()
	if err != nil {
		b.Fatal(err)
	}
	for _, enc := range []struct {
		name   string
		e      repository.Encoding
		signer *signing.Key
	}{
		{"zstd", repository.Encoding{Compression: "zstd"}, nil},
		{"zstd+signed", repository.Encoding{Compression: "zstd"}, key},
		{"zstd+age", repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, nil},
		{"zstd+age+signed", repository.Encoding{Compression: "zstd", Recipients: []age.Recipient{id.Recipient()}, RecipientKeys: []string{id.Recipient().String()}}, key},
	} {
		b.Run(enc.name, func(b *testing.B) {
			d, err := uploader.NewDir(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			repo := repository.New(d, "bench")
			repo.Signer = enc.signer
			rng := rand.New(rand.NewPCG(1, 2))
			const n = 1000
			revs := make([]repository.Revision, n)
			var raw int64
			for i := range revs {
				v := make([]byte, 1024+rng.IntN(3072))
				for j := range v {
					v[j] = "abcdefghijklmnopqrstuvwxyz{}\":,0123456789"[rng.IntN(40)]
				}
				k := fmt.Appendf(nil, "/registry/configmaps/ns%d/cm%d", i%20, i)
				revs[i] = repository.Revision{Revision: int64(101 + i), Received: time.Unix(0, int64(i)),
					Ops: []repository.Op{{Key: k, Value: v, CreateRevision: int64(101 + i), Version: 1}}}
				raw += int64(len(k) + len(v))
			}
			b.SetBytes(raw)
			b.ReportAllocs()
			prev := ""
			first := int64(101)
			for i := 0; b.Loop(); i++ {
				for j := range revs {
					revs[j].Revision = first + int64(j)
					revs[j].Ops[0].CreateRevision = revs[j].Revision
				}
				s := &repository.Segment{SegmentHeader: repository.SegmentHeader{
					Format: repository.SegmentFormat, ClusterID: 1, Generation: "g", First: first, Last: first + n - 1,
					CapturedThrough: first + n - 1, CapturedAt: time.Unix(1, 0), PrevHash: prev, Token: 1,
				}, Revisions: revs}
				if prev == "" {
					s.SnapshotID, s.SnapshotRevision = "snap", first-1
				}
				_, sum, err := repo.PutSegment(b.Context(), s, enc.e)
				if err != nil {
					b.Fatal(err)
				}
				prev, first = sum, first+n
			}
		})
	}
}
