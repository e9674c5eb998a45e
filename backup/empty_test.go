package backup

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/snapshot"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestRunEmptyCluster: an etcd that was never written to has nothing to
// back up (its snapshot holds revision 0, which no backup can name). The
// backup fails with ErrEmptyCluster, saying so and what makes it
// possible, and leaves nothing in the store (before: "commit backup …:
// bad manifest: revision 0" after the data object was stored, an orphan
// at every try).
func TestRunEmptyCluster(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	st, err := uploader.NewDir(filepath.Join(t.TempDir(), "store"))
	if err != nil {
		t.Fatal(err)
	}
	b := &repository.Repo{Store: st, Cluster: "c"}
	job := Job{
		Etcd:     snapshot.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second, Member: "any"},
		SpoolDir: filepath.Join(t.TempDir(), "spool"),
		Backups:  b,
		Encoding: repository.Encoding{Compression: "zstd"},
	}
	lg, _ := jobtest.Logger(t)
	hashes := hashKVCount(t)
	_, err = Run(t.Context(), job, lg)
	if !errors.Is(err, ErrEmptyCluster) || !strings.Contains(err.Error(), "never been written") {
		t.Fatalf("Run: %v; want ErrEmptyCluster", err)
	}
	// No member is asked for a HashKV at revision 0, which etcd reads as
	// its current revision: never the snapshot's. (Asked, it outlived Run:
	// the CI of 051b982 saw the member, stopped by the test's cleanup,
	// panic in that HashKV.)
	time.Sleep(500 * time.Millisecond)
	if n := hashKVCount(t); n != hashes {
		t.Errorf("etcd hashed its store %d time(s) for a backup of an empty cluster; want none", n-hashes)
	}
	var left []string
	if err := st.List(t.Context(), "", func(o uploader.ObjectInfo) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("the store holds %v after a failed backup; want nothing", left)
	}
}

// hashKVCount is how many HashKVs the etcd members of this process have
// computed (etcd's own histogram, in the default registry).
func hashKVCount(t *testing.T) uint64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_hash_rev_duration_seconds" {
			var n uint64
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
			return n
		}
	}
	t.Fatal("no etcd_mvcc_hash_rev_duration_seconds: the members are not in this process")
	return 0
}
