package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
)

// helpOf is what `lifeboat ARGS --help` prints.
func helpOf(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(t.Context(), append(args, "--help"), &out, &errOut); code != 0 {
		t.Fatalf("%v --help: exit %d\n%s", args, code, errOut.String())
	}
	return out.String()
}

// TestHelpListsTheFlagsACommandReads (issue 29 §3): each command's
// --help lists the flags it reads and no others: a reader (ls, fetch,
// restore, …) does not offer the writers' encryption recipients, bucket
// creation or lineage adoption, nor the daemon's capture or schedules;
// commands that read no configuration (version, keygen) list no
// configuration flags.
func TestHelpListsTheFlagsACommandReads(t *testing.T) {
	writers := []string{"recipient", "recipients-file", "s3-create-bucket", "adopt-cluster"}
	daemon := []string{"capture-interval", "snapshot-schedule", "listen", "webhook", "pushgateway"}
	config := []string{"config", "log-level", "log-format"}
	tests := []struct {
		args      []string
		want, not []string
	}{
		{[]string{"snapshot"}, append(writers, "endpoints", "signing-key", "kit-path", "spool-dir", "log-level", "config"), daemon},
		{[]string{"agent"}, append(append([]string{}, writers...), daemon...), nil},
		{[]string{"demo"}, []string{"recipient", "identity-file"}, daemon},
		{[]string{"copy"}, []string{"s3-create-bucket", "copy"}, append([]string{"recipient", "adopt-cluster"}, daemon...)},
		{[]string{"ls"}, []string{"identity-file", "cache-dir", "trusted-key", "store", "log-level"}, append(append([]string{"keep-last"}, writers...), daemon...)},
		{[]string{"get"}, []string{"identity-file", "encryption-config"}, append(writers, daemon...)},
		{[]string{"diff"}, []string{"identity-file"}, append(writers, daemon...)},
		{[]string{"fetch"}, []string{"identity-file", "spool-dir", "output-file"}, append(writers, daemon...)},
		{[]string{"verify"}, []string{"identity-file"}, append(writers, daemon...)},
		{[]string{"restore"}, []string{"identity-file", "scratch-dir"}, append(writers, daemon...)},
		{[]string{"drill"}, []string{"identity-file", "signing-key", "scratch-dir"}, append(writers, daemon...)},
		{[]string{"log"}, []string{"identity-file"}, append(writers, daemon...)},
		{[]string{"list"}, []string{"store", "copy"}, append(writers, daemon...)},
		{[]string{"prune"}, []string{"keep-last"}, append(writers, daemon...)},
		{[]string{"kit", "show"}, []string{"identity-file"}, append(writers, daemon...)},
		{[]string{"kit", "restore"}, []string{"identity-file"}, append(writers, daemon...)},
		{[]string{"fleet", "status"}, []string{"fleet-store"}, append(writers, daemon...)},
		{[]string{"version"}, nil, config},
		{[]string{"keygen"}, []string{"public"}, config},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			help := helpOf(t, tt.args...)
			for _, f := range tt.want {
				if !strings.Contains(help, "--"+f+" ") {
					t.Errorf("%s --help does not list --%s, which it reads", strings.Join(tt.args, " "), f)
				}
			}
			for _, f := range tt.not {
				if strings.Contains(help, "--"+f+" ") {
					t.Errorf("%s --help lists --%s, which it does not read", strings.Join(tt.args, " "), f)
				}
			}
		})
	}
}

// TestReadersNeverCreateTheBucket: --s3-create-bucket is the writers'
// (snapshot, the agent, a copy's store); a reader given it (a shared
// config file) does not create a missing bucket, it says it is missing.
func TestReadersNeverCreateTheBucket(t *testing.T) {
	srv := s3test.Start(t)
	env := s3CLIEnv(t, srv)
	code, out, errOut := runCLI(t, env, "list", "--store", "s3://typo/etcd", "--s3-endpoint", srv.Endpoint, "--s3-path-style",
		"--s3-region", srv.Region, "--s3-create-bucket", "--cluster", "prod")
	if code == 0 || !strings.Contains(errOut, "does not exist") {
		t.Errorf("list of a missing bucket with --s3-create-bucket: exit %d, want an error saying it does not exist\n%s\n%s", code, out, errOut)
	}
	if _, err := srv.Client(t).HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String("typo")}); err == nil {
		t.Error("list created the bucket")
	}
}
