package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lifeboat-dev/lifeboat/internal/test/etcdtest"
	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// s3CLIEnv gives the AWS SDK chain the server's credentials and nothing
// else from this machine.
func s3CLIEnv(t *testing.T, srv *s3test.Server) map[string]string {
	none := filepath.Join(t.TempDir(), "none")
	return map[string]string{
		"AWS_ACCESS_KEY_ID": srv.AccessKey, "AWS_SECRET_ACCESS_KEY": srv.SecretKey,
		"AWS_CONFIG_FILE": none, "AWS_SHARED_CREDENTIALS_FILE": none, "AWS_EC2_METADATA_DISABLED": "true",
		"AWS_PROFILE": "", "AWS_REGION": "", "AWS_ENDPOINT_URL_S3": "", "AWS_ENDPOINT_URL": "",
	}
}

// TestSnapshotToS3 runs the whole chain against versitygw: encrypted,
// Object-Locked backup, list, verify with the right and the wrong identity.
func TestSnapshotToS3(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	res := seedCluster(t, c, 600)
	srv := s3test.Start(t)
	srv.CreateBucket(t, "backups", true)
	env := s3CLIEnv(t, srv)

	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	other, _ := age.GenerateX25519Identity()
	dir := t.TempDir()
	idFile := filepath.Join(dir, "id.txt")
	os.WriteFile(idFile, []byte(id.String()+"\n"), 0o600)
	otherFile := filepath.Join(dir, "other.txt")
	os.WriteFile(otherFile, []byte(other.String()+"\n"), 0o600)

	common := []string{"--store", "s3://backups/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style", "--s3-region", srv.Region,
		"--endpoints", c.Endpoints()[0], "--spool-dir", filepath.Join(dir, "spool"), "--cluster", "prod", "--log-level", "error"}
	code, out, errOut := runCLI(t, env, append([]string{"snapshot", "--recipient", id.Recipient().String(),
		"--object-lock-mode", "GOVERNANCE", "--object-lock-retain", "1d"}, common...)...)
	if code != 0 {
		t.Fatalf("snapshot to S3 exit %d\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, srv.SecretKey) {
		t.Error("the S3 secret key appears in the output")
	}

	code, out, errOut = runCLI(t, env, append([]string{"list", "-o", "json"}, common...)...)
	if code != 0 {
		t.Fatalf("list exit %d: %s", code, errOut)
	}
	var l listOutput
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l.Backups) != 1 {
		t.Fatalf("list: %v\n%s", err, out)
	}
	m := l.Backups[0].Manifest
	if m.Encryption != "age" || len(m.Recipients) != 1 || m.Recipients[0] != id.Recipient().String() {
		t.Errorf("manifest encryption %s recipients %v", m.Encryption, m.Recipients)
	}
	if m.LockMode != "GOVERNANCE" || m.RetainUntil == nil {
		t.Errorf("manifest lock %q until %v", m.LockMode, m.RetainUntil)
	}
	if m.TotalKeys != res.Keys || m.HashKVStatus != "match" {
		t.Errorf("manifest keys %d (want %d), hashkv %s", m.TotalKeys, res.Keys, m.HashKVStatus)
	}
	if !strings.HasPrefix(m.Object, "prod/snapshots/") || !strings.HasSuffix(m.Object, ".db.zst.age") {
		t.Errorf("object key %s", m.Object)
	}
	head, err := srv.Client(t).HeadObject(t.Context(), &s3.HeadObjectInput{Bucket: aws.String("backups"), Key: aws.String("etcd/" + m.Object)})
	if err != nil {
		t.Fatalf("head the object: %v", err)
	}
	if string(head.ObjectLockMode) != "GOVERNANCE" {
		t.Errorf("object lock mode on the server: %q", head.ObjectLockMode)
	}

	code, out, errOut = runCLI(t, env, append([]string{"verify", "latest", "--identity-file", idFile}, common...)...)
	if code != 0 || !strings.Contains(out, "is good") {
		t.Errorf("verify with the identity: exit %d\n%s%s", code, out, errOut)
	}
	code, _, errOut = runCLI(t, env, append([]string{"verify", "latest", "--identity-file", otherFile}, common...)...)
	if code != 2 || !strings.Contains(errOut, "cannot decrypt with the given identity") {
		t.Errorf("verify with the wrong identity: exit %d: %s", code, errOut)
	}
	code, _, errOut = runCLI(t, env, append([]string{"verify", "latest"}, common...)...)
	if code != 2 || !strings.Contains(errOut, "--identity-file") {
		t.Errorf("verify without identity: exit %d: %s", code, errOut)
	}
}

func TestS3BadInput(t *testing.T) {
	srv := s3test.Start(t)
	srv.CreateBucket(t, "plain", false)
	tests := []struct {
		name     string
		env      func(map[string]string)
		args     []string
		wantCode int
		wantErr  string
	}{
		{name: "missing bucket", args: []string{"--store", "s3://nope/x"}, wantCode: 1, wantErr: "--s3-create-bucket"},
		{name: "wrong secret", env: func(e map[string]string) { e["AWS_SECRET_ACCESS_KEY"] = "wrong-secret-value" }, args: []string{"--store", "s3://plain/x"}, wantCode: 1, wantErr: "secret key"},
		{name: "malformed endpoint", args: []string{"--store", "s3://plain/x", "--s3-endpoint", "ht!tp://bad"}, wantCode: 2, wantErr: "endpoint"},
		{name: "object lock on a bucket without it", args: []string{"--store", "s3://plain/x", "--object-lock-mode", "COMPLIANCE", "--object-lock-retain", "1d"}, wantCode: 1, wantErr: "object lock"},
	}
	c := etcdtest.Start(t, etcdtest.Options{Members: 1})
	seedCluster(t, c, 50)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := s3CLIEnv(t, srv)
			if tt.env != nil {
				tt.env(env)
			}
			spool := filepath.Join(t.TempDir(), "spool")
			args := append([]string{"snapshot", "--endpoints", c.Endpoints()[0], "--spool-dir", spool, "--log-level", "error"}, tt.args...)
			if !strings.Contains(strings.Join(tt.args, " "), "--s3-endpoint") {
				args = append(args, "--s3-endpoint", srv.Endpoint, "--s3-path-style")
			}
			code, out, errOut := runCLI(t, env, args...)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d\n%s%s", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(strings.ToLower(errOut), strings.ToLower(tt.wantErr)) {
				t.Errorf("error does not mention %q: %s", tt.wantErr, errOut)
			}
			if strings.Contains(errOut, srv.SecretKey) || strings.Contains(errOut, "wrong-secret-value") {
				t.Error("a secret appears in the error")
			}
			if entries, err := os.ReadDir(spool); err == nil && len(entries) != 0 {
				t.Errorf("spool not empty: %v", entries)
			}
			objs, err := srv.Client(t).ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String("plain")})
			if err == nil && len(objs.Contents) != 0 {
				t.Errorf("bucket holds %d objects after a failure", len(objs.Contents))
			}
		})
	}
}
