package kit_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// BenchmarkBackupKit: what a backup with kit.paths [kubeadm] adds, into a
// directory store: collecting the files and, when unchanged, one read of
// the kit's manifest (stored once, the first time).
func BenchmarkBackupKit(b *testing.B) {
	root := b.TempDir()
	kittest.Kubeadm(b, root, time.Now(), time.Now().Add(time.Hour))
	id, _ := kittest.Identity(b, b.TempDir())
	st, err := uploader.NewDir(filepath.Join(b.TempDir(), "store"))
	if err != nil {
		b.Fatal(err)
	}
	r := kit.Repo{Store: st, Cluster: "bench"}
	var size int64
	for b.Loop() {
		k, err := kit.Collect(root, []string{"kubeadm"})
		if err != nil {
			b.Fatal(err)
		}
		res, err := r.Put(b.Context(), k, encryption(id), []string{"kubeadm"}, time.Now(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		size = res.Manifest.ObjectSize
	}
	b.ReportMetric(float64(size), "object-bytes")
}
