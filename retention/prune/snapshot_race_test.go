package prune

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/backup"
	"github.com/lifeboat-dev/lifeboat/internal/test/jobtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// smallestGrace is the smallest orphan grace the configuration accepts for
// a snapshot timeout (no retries).
func smallestGrace(timeout time.Duration) time.Duration {
	return MinOrphanGrace(timeout, 0, 0)
}

var raceBucketSeq atomic.Int64

// TestPruneDuringSnapshot: prune with the smallest orphan grace allowed
// runs while a large snapshot (about 12 MiB, uncompressed) is being
// stored: while its multipart upload is in flight (S3), and in the window
// between its data object and its manifest (Dir and S3). The snapshot
// commits and lists, whole. With a grace of 0, prune aborted the upload
// and deleted the data object.
func TestPruneDuringSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd and versitygw")
	}
	f := jobtest.NewFixture(t, nil, 4000)
	srv := s3test.Start(t)
	const timeout = 2 * time.Minute
	for _, tc := range []struct {
		name     string
		s3       bool
		holdPart bool // hold the second part of the upload, not the manifest
	}{
		{name: "dir, before the manifest"},
		{name: "s3, before the manifest", s3: true},
		{name: "s3, multipart upload in flight", s3: true, holdPart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lg, _ := jobtest.Logger(t)
			reached := make(chan string, 1)
			release := make(chan struct{})
			var releaseOnce sync.Once
			unhold := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(unhold)
			var st uploader.Store
			if tc.s3 {
				s3test.Env(t, srv.AccessKey, srv.SecretKey)
				proxy := s3test.NewProxy(t, srv.Endpoint)
				bucket := fmt.Sprintf("race-test-%d", raceBucketSeq.Add(1))
				srv.CreateBucket(t, bucket, false)
				s, err := uploader.NewS3(t.Context(), uploader.S3Config{
					Bucket: bucket, Prefix: "team", Endpoint: proxy.URL, Region: srv.Region, PathStyle: true,
					PartSize: uploader.MinS3PartSize, Concurrency: 1,
				}, nil)
				if err != nil {
					t.Fatalf("NewS3: %v", err)
				}
				st = s
				if tc.holdPart {
					proxy.SetFault(func(r *http.Request, n int) s3test.Fault {
						if s3test.Op(r) == "UploadPart" && n == 2 {
							reached <- "part 2"
							<-release
						}
						return s3test.None
					})
				}
			} else {
				d, err := uploader.NewDir(t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				st = d
			}
			b := &repository.Repo{Store: st, Cluster: jobtest.Cluster}
			held := b
			if !tc.holdPart {
				held = &repository.Repo{Store: jobtest.HoldStore{Store: st, Reached: reached, Release: release}, Cluster: jobtest.Cluster}
			}
			job := backup.Job{
				Etcd: f.EtcdConfig(), SpoolDir: filepath.Join(t.TempDir(), "spool"), Backups: held,
				Encoding: repository.Encoding{Compression: "none"}, Version: "test",
			}
			type result struct {
				m   *repository.Manifest
				err error
			}
			done := make(chan result, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				m, err := backup.Run(ctx, job, lg)
				done <- result{m, err}
			}()
			select {
			case what := <-reached:
				t.Logf("holding the snapshot at %s", what)
			case r := <-done:
				t.Fatalf("snapshot ended before it was held: %v", r.err)
			case <-time.After(timeout):
				t.Fatal("the snapshot never reached the hold")
			}
			grace := smallestGrace(timeout)
			res, err := Run(t.Context(), Job{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: grace}, lg)
			if err != nil {
				t.Errorf("prune with grace %v: %v", grace, err)
			}
			if res != nil && (res.OrphansRemoved > 0 || res.UploadsAborted > 0) {
				t.Errorf("prune with grace %v during the snapshot: %d orphan(s) removed, %d upload(s) aborted", grace, res.OrphansRemoved, res.UploadsAborted)
			}
			unhold()
			r := <-done
			if r.err != nil {
				t.Fatalf("snapshot: %v", r.err)
			}
			l, err := b.List(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if len(l.Backups) != 1 || l.Backups[0].Manifest.ID != r.m.ID || l.Backups[0].State != repository.StateOK || len(l.Orphans) != 0 {
				var got []string
				for _, e := range l.Backups {
					got = append(got, e.Manifest.ID+" "+e.State+" "+e.Problem)
				}
				t.Errorf("listed %q, orphans %d; want %s ok and no orphan", got, len(l.Orphans), r.m.ID)
			}
		})
	}
}
