package uploader_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestS3PutRefusesBadLockOptions checks that the S3 store, called as a
// library, refuses the Object Lock options the configuration refuses
// (store.object_lock.mode, a mode without retention, retention without a
// mode) before it sends anything, into a bucket that has Object Lock.
func TestS3PutRefusesBadLockOptions(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, true)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	for _, tc := range []struct {
		name string
		opts uploader.PutOptions
		want string
	}{
		{"lower case mode", uploader.PutOptions{LockMode: "governance", RetainUntil: until}, `lock mode: "governance" is not GOVERNANCE or COMPLIANCE`},
		{"unknown mode", uploader.PutOptions{LockMode: "LEGAL", RetainUntil: until}, `lock mode: "LEGAL" is not GOVERNANCE or COMPLIANCE`},
		{"mode without retention", uploader.PutOptions{LockMode: "COMPLIANCE"}, "lock mode COMPLIANCE without a retain-until time"},
		{"retention without mode", uploader.PutOptions{RetainUntil: until}, "retain-until time without a lock mode (GOVERNANCE or COMPLIANCE)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(t.Context(), key, bytes.NewReader(storetest.Data(1, 1000)), tc.opts)
			if err == nil {
				t.Fatalf("Put with %+v succeeded; want an error containing %q", tc.opts, tc.want)
			}
			for _, want := range []string{key, tc.want} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Put error %q does not contain %q", err, want)
				}
			}
			storetest.AssertMissing(t, s, key)
			assertNoUploads(t, srv, bucket)
		})
	}
}
