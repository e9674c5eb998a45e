package agent

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/retention"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// holdStore is a real store whose Puts of manifests wait until released:
// the window between a backup's data object and its manifest, held open.
type holdStore struct {
	uploader.Store
	reached chan<- string
	release <-chan struct{}
}

func (h holdStore) Put(ctx context.Context, key string, r io.Reader, opts uploader.PutOptions) (uploader.ObjectInfo, error) {
	if strings.Contains(key, "/snapshots/") && strings.HasSuffix(key, ".json") {
		select {
		case h.reached <- key:
		default:
		}
		select {
		case <-h.release:
		case <-ctx.Done():
			return uploader.ObjectInfo{}, ctx.Err()
		}
	}
	return h.Store.Put(ctx, key, r, opts)
}

// smallestGrace is the smallest orphan grace the configuration accepts for
// a snapshot timeout (no retries).
func smallestGrace(timeout time.Duration) time.Duration {
	return MinOrphanGrace(timeout, 0, 0)
}

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
	f := newFixture(t, nil, 4000)
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
			lg, _ := testLogger(t)
			reached := make(chan string, 1)
			release := make(chan struct{})
			var releaseOnce sync.Once
			unhold := func() { releaseOnce.Do(func() { close(release) }) }
			t.Cleanup(unhold)
			var st uploader.Store
			if tc.s3 {
				s3Env(t, srv.AccessKey, srv.SecretKey)
				proxy := s3test.NewProxy(t, srv.Endpoint)
				bucket := fmt.Sprintf("race-test-%d", bucketSeq.Add(1))
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
			b := &repository.Repo{Store: st, Cluster: testCluster}
			held := b
			if !tc.holdPart {
				held = &repository.Repo{Store: holdStore{Store: st, reached: reached, release: release}, Cluster: testCluster}
			}
			job := SnapshotJob{
				Etcd: f.etcdConfig(), SpoolDir: filepath.Join(t.TempDir(), "spool"), Backups: held,
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
				m, err := Snapshot(ctx, job, lg)
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
			res, err := Prune(t.Context(), PruneJob{Backups: b, Policy: retention.Policy{Last: 1}, OrphanGrace: grace}, lg)
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

// TestAgentNoOrphanSweepDuringSnapshot: in the daemon, prune removes no
// orphan while a snapshot of the cluster is in flight, whatever the grace
// (here 1ns, below any floor: only the in-flight rule protects the
// snapshot's data object); an old orphan waits for the next run.
func TestAgentNoOrphanSweepDuringSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: real etcd")
	}
	f := newFixture(t, nil, 200)
	lg, _ := testLogger(t)
	old := putObject(t, f.backups, time.Now().Add(-72*time.Hour), uploader.PutOptions{})
	reached := make(chan string, 1)
	release := make(chan struct{})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold)
	held := &repository.Repo{Store: holdStore{Store: f.backups.Store, reached: reached, release: release}, Cluster: testCluster}

	cfg := f.config(t, lg)
	cfg.Snapshot.Backups = held
	cfg.Prune.OrphanGrace = time.Nanosecond
	cfg.Prune.Policy = retention.Policy{Last: 5}
	cfg.Drill = nil
	cfg.Schedules = Schedules{Snapshot: "@every 1h", Prune: "@every 1h"}
	cfg.Listen = ""
	a, err := New(cfg, lg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.runs.Wait)
	snap := a.byName[JobSnapshot]
	a.trigger(t.Context(), snap, "test")
	select {
	case <-reached:
	case <-time.After(time.Minute):
		t.Fatal("the snapshot never reached its manifest")
	}
	if _, err := a.prune(t.Context()); err != nil {
		t.Errorf("prune during the snapshot: %v", err)
	}
	_, orphans := listed(t, f.backups)
	if len(orphans) != 2 {
		t.Errorf("orphans after a prune during the snapshot: %q; want the old one and the snapshot's data object", orphans)
	}
	unhold()
	waitFor(t, "the snapshot to end", time.Minute, func() bool { return !snap.running.Load() })
	snap.mu.Lock()
	last := snap.last
	snap.mu.Unlock()
	if last == nil || last.Result != ResultSuccess {
		t.Fatalf("snapshot run: %+v", last)
	}
	ids, orphans := listed(t, f.backups)
	if len(ids) != 1 || ids[0] != last.BackupID || len(orphans) != 1 {
		t.Errorf("after the snapshot: backups %q, orphans %q; want [%s] and the old orphan", ids, orphans, last.BackupID)
	}
	// No snapshot in flight: the old orphan goes.
	if _, err := a.prune(t.Context()); err != nil {
		t.Errorf("prune: %v", err)
	}
	if _, orphans := listed(t, f.backups); len(orphans) != 0 {
		t.Errorf("orphans after prune with no snapshot in flight: %q; want %s removed", orphans, old.Object)
	}
}
