package drill

import (
	"testing"

	"github.com/lifeboat-dev/lifeboat/repository"
)

// TestDrillQuotaFitsTheBackup (issue 31): the drill's throwaway etcd ran
// with etcd's default 2 GiB backend quota, so a 2.6 GB backup booted with
// its NOSPACE alarm raised and the drill's test write failed ("mvcc:
// database space exceeded"): a false FAILED verdict, every day, for every
// cluster bigger than the default. The quota is sized from the backup:
// room above the database for the test write and bbolt's growth, never
// below etcd's default.
func TestDrillQuotaFitsTheBackup(t *testing.T) {
	const GiB = 1 << 30
	for _, tc := range []struct {
		name string
		db   int64
		min  int64
	}{
		{"small", 1 << 20, 2 * GiB},
		{"2.6 GB", 2600 << 20, 2600<<20 + 256<<20},
		{"8 GiB", 8 * GiB, 8*GiB + 256<<20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &drill{m: &repository.Manifest{DBSize: tc.db}}
			q := d.etcdOptions(drillMember{dataDir: t.TempDir()}, t.TempDir()).QuotaBytes
			if q < tc.min {
				t.Fatalf("quota for a %d-byte backup: %d bytes, want at least %d", tc.db, q, tc.min)
			}
		})
	}
}
