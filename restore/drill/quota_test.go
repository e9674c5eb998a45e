package drill

import (
	"testing"
	"time"

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

// TestDrillBootWaitFitsTheBackup (issue 31, found by make bench-scale
// SIZE=8GB): the throwaway etcd was given 60 s to be ready whatever the
// database, and on the 8.3 GB bench database it was not (its boot, which
// rebuilds the key index from the whole file, took 92 s on this loaded
// machine): the drill could not run at all, every day, on every cluster
// that size. The wait grows with the database; small ones keep 60 s.
func TestDrillBootWaitFitsTheBackup(t *testing.T) {
	const GiB = 1 << 30
	for _, tc := range []struct {
		name string
		db   int64
		min  time.Duration
	}{
		{"small", 1 << 20, 60 * time.Second},
		{"2.6 GB", 2600 << 20, 2 * time.Minute},
		{"8.3 GB", 8300 << 20, 4 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &drill{m: &repository.Manifest{DBSize: tc.db}}
			w := d.etcdOptions(drillMember{dataDir: t.TempDir()}, t.TempDir()).ReadyTimeout
			if w < tc.min {
				t.Fatalf("boot wait for a %d-byte backup: %s, want at least %s", tc.db, w, tc.min)
			}
		})
	}
}
