package repository_test

import (
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// dirBackups returns a cached repository of cluster "test" in a fresh
// directory store under dir.
func dirBackups(t testing.TB, dir string) *repository.Repo {
	t.Helper()
	st, err := uploader.NewDir(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	return repository.New(st, "test")
}

type faultEnv struct {
	srv    *s3test.Server
	proxy  *s3test.Proxy
	bucket string
	store  *uploader.S3
}

var bucketSeq atomic.Int64

// newFaultEnv puts a counting, fault-injecting proxy between an S3 store
// and a fresh bucket of a real versitygw.
func newFaultEnv(t *testing.T) faultEnv {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := fmt.Sprintf("lifeboat-repository-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, bucket, false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{
		Bucket: bucket, Prefix: "lifeboat/prod", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
		PartSize: uploader.MinS3PartSize, Concurrency: 2, MaxAttempts: 4, MaxBackoff: 100 * time.Millisecond, ReadTimeout: 2 * time.Second,
	}, nil)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return faultEnv{srv: srv, proxy: proxy, bucket: bucket, store: st}
}
