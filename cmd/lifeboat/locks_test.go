package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/repository"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestCreateBucketWithObjectLock: --s3-create-bucket with Object Lock
// configured creates a bucket with Object Lock enabled, and the first
// snapshot into it succeeds (issue 28: it used to create a bucket
// without, and every locked upload failed).
func TestCreateBucketWithObjectLock(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 50)
	srv := s3test.Start(t)
	env := s3CLIEnv(t, srv)
	code, out, errOut := runCLI(t, env, "snapshot", "--store", "s3://fresh/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style",
		"--s3-region", srv.Region, "--s3-create-bucket", "--object-lock-mode", "COMPLIANCE", "--object-lock-retain", "1h",
		"--endpoints", c.Endpoints()[0], "--spool-dir", filepath.Join(t.TempDir(), "spool"), "--log-level", "error")
	if code != 0 {
		t.Fatalf("snapshot into a bucket it creates: exit %d\n%s%s", code, out, errOut)
	}
	got, err := srv.Client(t).GetObjectLockConfiguration(t.Context(), &s3.GetObjectLockConfigurationInput{Bucket: aws.String("fresh")})
	if err != nil {
		t.Fatalf("the created bucket's Object Lock configuration: %v", err)
	}
	if c := got.ObjectLockConfiguration; c == nil || c.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
		t.Errorf("the created bucket's Object Lock configuration = %+v, want enabled", c)
	}
}

// TestVerifyLocks: with COMPLIANCE Object Lock on the primary and on a
// copy, a snapshot and a copy run lock every object; verify --locks is
// clean on both (the copy with --store of the copy), and none of the
// objects can be deleted by version with the bucket's own credentials. A
// store written without a lock is named object by object, exit 1.
func TestVerifyLocks(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 50)
	srv := s3test.Start(t)
	for _, b := range []string{"primary", "copy-dr", "plain"} {
		srv.CreateBucket(t, b, true)
	}
	env := s3CLIEnv(t, srv)
	cfg := writeFile(t, "lifeboat.yaml", `cluster: prod
store:
  url: s3://primary/etcd
  s3: {endpoint: "`+srv.Endpoint+`", region: `+srv.Region+`, path_style: true}
  object_lock: {mode: COMPLIANCE, retain: 1h}
copies:
  - name: dr
    url: s3://copy-dr/etcd
    object_lock: {mode: COMPLIANCE, retain: 1h}
`)
	common := []string{"--config", cfg, "--endpoints", c.Endpoints()[0], "--spool-dir", filepath.Join(t.TempDir(), "spool"), "--log-level", "error"}
	run := func(want int, args ...string) string {
		t.Helper()
		code, out, errOut := runCLI(t, env, append(args, common...)...)
		if code != want {
			t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, want, out, errOut)
		}
		return out + errOut
	}
	run(0, "snapshot")
	// A window of changes after it, as capture writes them, locked.
	primary := s3Repo(t, srv, "primary", "etcd", "prod")
	primary.Lock = repository.LockPolicy{Retention: uploader.Retention{Mode: uploader.LockCompliance, For: time.Hour}}
	putWindow(t, primary, 2)
	run(0, "copy")
	for _, store := range []string{"s3://primary/etcd", "s3://copy-dr/etcd"} {
		out := run(0, "verify", "--locks", "--store", store)
		if !strings.Contains(out, ", 0 not locked") {
			t.Errorf("verify --locks of %s:\n%s", store, out)
		}
	}
	cl := srv.Client(t)
	for _, bucket := range []string{"primary", "copy-dr"} {
		vs, err := cl.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		kinds := map[string]int{}
		for _, v := range vs.Versions {
			for _, k := range []string{"/snapshots/", "/changes/", "/progress/"} {
				if strings.Contains(aws.ToString(v.Key), k) {
					kinds[k]++
				}
			}
		}
		if kinds["/snapshots/"] < 2 || kinds["/changes/"] < 2 || kinds["/progress/"] < 1 {
			t.Errorf("bucket %s holds %v: want a backup, its window's segments and marker", bucket, kinds)
		}
		for _, v := range vs.Versions {
			_, err := cl.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: v.Key, VersionId: v.VersionId})
			if err == nil {
				t.Errorf("s3://%s/%s deleted by version despite COMPLIANCE", bucket, aws.ToString(v.Key))
			}
		}
	}

	// Written without a lock: every object is named.
	code, out, errOut := runCLI(t, env, "snapshot", "--store", "s3://plain/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style",
		"--s3-region", srv.Region, "--cluster", "prod", "--endpoints", c.Endpoints()[0], "--spool-dir", filepath.Join(t.TempDir(), "spool"), "--log-level", "error")
	if code != 0 {
		t.Fatalf("snapshot without a lock: exit %d\n%s%s", code, out, errOut)
	}
	// And a window of changes after it, written without a lock too.
	plain := s3Repo(t, srv, "plain", "etcd", "prod")
	putWindow(t, plain, 2)

	code, out, errOut = runCLI(t, env, "verify", "--locks", "--store", "s3://plain/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style",
		"--s3-region", srv.Region, "--cluster", "prod", "--object-lock-mode", "COMPLIANCE", "--object-lock-retain", "1h", "--log-level", "error")
	if code != 1 {
		t.Fatalf("verify --locks of an unlocked store: exit %d, want 1\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"KIND", "backup", "manifest", "prod/snapshots/", ".json", "unlocked", "segment", "prod/changes/", "marker", "prod/progress/", "5 not locked"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify --locks of an unlocked store does not say %q:\n%s", want, out)
		}
	}
}

// s3Repo opens the repository of cluster under s3://bucket/prefix on srv.
func s3Repo(t *testing.T, srv *s3test.Server, bucket, prefix, cluster string) *repository.Repo {
	t.Helper()
	st, err := uploader.NewS3(t.Context(), uploader.S3Config{Bucket: bucket, Prefix: prefix, Endpoint: srv.Endpoint, Region: srv.Region, PathStyle: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return repository.New(st, cluster)
}

// putWindow writes a recoverable window of n segments (two revisions
// each) after b's newest backup, and a progress marker through its end,
// with b's lock (none for a zero Repo.Lock).
func putWindow(t *testing.T, b *repository.Repo, n int) {
	t.Helper()
	l, err := b.List(t.Context())
	if err != nil || len(l.Backups) == 0 {
		t.Fatalf("list %s: %v (%d backups)", b.Store, err, len(l.Backups))
	}
	m := l.Backups[0].Manifest
	next, prev, key := m.Revision+1, "", ""
	at := time.Now().UTC()
	for range n {
		var revs []repository.Revision
		for range 2 {
			revs = append(revs, repository.Revision{Revision: next, Received: at,
				Ops: []repository.Op{{Key: []byte(fmt.Sprintf("/k/%d", next)), Value: []byte("v"), CreateRevision: next, Version: 1}}})
			next++
		}
		h := repository.SegmentHeader{Format: repository.SegmentFormat, ClusterID: 42, Generation: m.ID, First: revs[0].Revision, Last: revs[1].Revision,
			CapturedThrough: revs[1].Revision, CapturedAt: at, Token: 1, PrevHash: prev}
		if prev == "" {
			h.SnapshotID, h.SnapshotRevision = m.ID, m.Revision
		}
		o, hash, err := b.PutSegment(t.Context(), &repository.Segment{SegmentHeader: h, Revisions: revs}, repository.Encoding{Compression: "zstd"})
		if err != nil {
			t.Fatal(err)
		}
		prev, key = hash, o.Key
	}
	if _, err := b.PutProgress(t.Context(), &repository.Progress{Format: repository.ProgressFormat, Generation: m.ID, ClusterID: "2a",
		SnapshotID: m.ID, SnapshotRevision: m.Revision, Through: next - 1, At: at, LastSegment: key, LastHash: prev, Token: 1}); err != nil {
		t.Fatal(err)
	}
}
