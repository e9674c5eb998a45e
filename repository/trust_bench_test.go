package repository

import (
	"fmt"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/signing"
)

// BenchmarkListTrust lists 300 manifests, read afresh each time (no
// cache), with and without signature checks, side by side: the cost
// signing adds to every listing (a snapshot lists once to claim its
// lineage; restore, drill and prune list once).
//
//	go test -run '^$' -bench BenchmarkListTrust ./repository
func BenchmarkListTrust(b *testing.B) {
	key, err := signing.Generate()
	if err != nil {
		b.Fatal(err)
	}
	base := newDirBackups(b)
	w := writer(base, key)
	t0 := time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)
	for i := range 300 {
		id := NewID(t0.Add(time.Duration(i)*time.Minute), int64(100+i))
		m := &Manifest{
			Format: ManifestFormat, ID: id, Cluster: base.Cluster, CreatedAt: t0, EtcdClusterID: "aaaa",
			Revision: int64(100 + i), TotalKeys: 1, SnapshotSHA256: fmt.Sprintf("%064x", i), Object: base.ObjectKey(id, Encoding{Compression: "zstd"}),
			ObjectSize: 1, ObjectSHA256: fmt.Sprintf("%064x", i), Compression: "zstd", Encryption: "none",
		}
		if err := w.PutManifest(b.Context(), m); err != nil {
			b.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		trust *signing.Trust
	}{{"unchecked", nil}, {"signed", &signing.Trust{Keys: []signing.PublicKey{key.Public()}}}} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				r := &Repo{Store: base.Store, Cluster: base.Cluster, Trust: tc.trust}
				l, err := r.List(b.Context())
				if err != nil || len(l.Backups) != 300 {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSignManifest is the writer's cost: one signature per backup.
func BenchmarkSignManifest(b *testing.B) {
	key, err := signing.Generate()
	if err != nil {
		b.Fatal(err)
	}
	m := &Manifest{Format: ManifestFormat, ID: "20261130T000000Z-r1", Cluster: "c", Revision: 1, SnapshotSHA256: fmt.Sprintf("%064x", 1),
		Object: "c/snapshots/x.db.zst", ObjectSHA256: fmt.Sprintf("%064x", 1), Compression: "zstd", Encryption: "none"}
	data, _ := m.Marshal()
	for b.Loop() {
		if _, err := key.SignJSON(kindManifest, "c/snapshots/x.json", data); err != nil {
			b.Fatal(err)
		}
	}
}
