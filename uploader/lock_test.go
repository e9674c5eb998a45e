package uploader_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// TestS3ExtendRetention: ExtendRetention locks an unlocked object, makes
// a lock last longer, never shortens one, keeps a COMPLIANCE lock in
// COMPLIANCE when asked for GOVERNANCE, and names a missing object with
// ErrNotFound; against versitygw with Object Lock.
func TestS3ExtendRetention(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	s := newS3(t, testS3Config(srv, srv.Endpoint, newBucket(t, srv, true)))
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Second)
	put := func(key string, opts uploader.PutOptions) {
		t.Helper()
		if _, err := s.Put(ctx, key, bytes.NewReader(storetest.Data(1, 100)), opts); err != nil {
			t.Fatal(err)
		}
	}
	check := func(key, mode string, until time.Time) {
		t.Helper()
		info, err := s.Stat(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if info.LockMode != mode || !info.RetainUntil.Equal(until) {
			t.Errorf("%s: %s until %s, want %s until %s", key, info.LockMode, info.RetainUntil, mode, until)
		}
	}
	put("plain", uploader.PutOptions{})
	put("locked", uploader.Retention{Mode: uploader.LockCompliance, For: time.Hour}.Options(now, ""))
	for _, tc := range []struct {
		name, key, mode string
		until           time.Time
		wantMode        string
		wantUntil       time.Time
	}{
		{"locks an unlocked object", "plain", uploader.LockGovernance, now.Add(time.Hour), uploader.LockGovernance, now.Add(time.Hour)},
		{"extends", "plain", uploader.LockGovernance, now.Add(2 * time.Hour), uploader.LockGovernance, now.Add(2 * time.Hour)},
		{"never shortens", "plain", uploader.LockGovernance, now.Add(time.Minute), uploader.LockGovernance, now.Add(2 * time.Hour)},
		{"keeps COMPLIANCE", "locked", uploader.LockGovernance, now.Add(3 * time.Hour), uploader.LockCompliance, now.Add(3 * time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := s.ExtendRetention(ctx, tc.key, tc.mode, tc.until); err != nil {
				t.Fatalf("ExtendRetention: %v", err)
			}
			check(tc.key, tc.wantMode, tc.wantUntil)
		})
	}
	if err := s.ExtendRetention(ctx, "missing", uploader.LockGovernance, now.Add(time.Hour)); !errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("ExtendRetention of a missing object: %v, want ErrNotFound", err)
	}
}
