package main

import (
	"path/filepath"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
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
