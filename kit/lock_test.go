package kit_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/kittest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/kit"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestStoreLocksAndExtendsKit: with a lock, a kit's object and manifest
// are stored under COMPLIANCE retention from the time Put is given, and a
// later Put of the same kit (a newer backup reusing it) extends both as
// far (PutObjectRetention on a real versitygw bucket with Object Lock).
func TestStoreLocksAndExtendsKit(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := fmt.Sprintf("lifeboat-kit-lock-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, true)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{Bucket: bucket, Prefix: "lifeboat", Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	kittest.Kubeadm(t, root, now, now.Add(90*24*time.Hour))
	id, _ := kittest.Identity(t, t.TempDir())
	k, err := kit.Collect(root, []string{"kubeadm"})
	if err != nil {
		t.Fatal(err)
	}
	r := kit.Repo{Store: st, Cluster: "prod", Lock: uploader.Retention{Mode: uploader.LockCompliance, For: time.Hour}}
	at := time.Now().UTC().Truncate(time.Second)
	check := func(m *kit.Manifest, until time.Time) {
		t.Helper()
		for _, key := range []string{m.Object, r.ManifestKey(m.ID)} {
			info, err := st.Stat(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if info.LockMode != uploader.LockCompliance || !info.RetainUntil.Equal(until) {
				t.Errorf("%s: lock %s until %s, want COMPLIANCE until %s", key, info.LockMode, info.RetainUntil, until)
			}
		}
	}
	first, err := r.Put(t.Context(), k, encryption(id), []string{"kubeadm"}, at, "test")
	if err != nil || !first.Stored {
		t.Fatalf("Put: %+v, %v", first, err)
	}
	check(first.Manifest, at.Add(time.Hour))
	again, err := r.Put(t.Context(), k, encryption(id), []string{"kubeadm"}, at.Add(30*time.Minute), "test")
	if err != nil || again.Stored || again.Manifest.ID != first.Manifest.ID {
		t.Fatalf("Put of the same kit: %+v, %v; want the stored one", again, err)
	}
	check(first.Manifest, at.Add(90*time.Minute))
	// An older backup's Put never shortens it.
	if _, err := r.Put(t.Context(), k, encryption(id), []string{"kubeadm"}, at, "test"); err != nil {
		t.Fatal(err)
	}
	check(first.Manifest, at.Add(90*time.Minute))
}
