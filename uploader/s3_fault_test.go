package uploader_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

// on injects f into the n-th request of operation op.
func on(op string, n int, f s3test.Fault) s3test.FaultFunc {
	return func(r *http.Request, i int) s3test.Fault {
		if s3test.Op(r) == op && i == n {
			return f
		}
		return s3test.None
	}
}

// every injects f into every request of operation op.
func every(op string, f s3test.Fault) s3test.FaultFunc {
	return func(r *http.Request, _ int) s3test.Fault {
		if s3test.Op(r) == op {
			return f
		}
		return s3test.None
	}
}

type faultEnv struct {
	srv    *s3test.Server
	proxy  *s3test.Proxy
	bucket string
	store  *uploader.S3
}

// faultReadTimeout is short so that a stalled request is abandoned and
// retried quickly.
const faultReadTimeout = 2 * time.Second

// newFaultEnv puts a fault proxy between a store and versitygw.
func newFaultEnv(t *testing.T) faultEnv {
	t.Helper()
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	proxy := s3test.NewProxy(t, srv.Endpoint)
	cfg := testS3Config(srv, proxy.URL, bucket)
	cfg.Concurrency = 2
	cfg.MaxAttempts = 4
	cfg.MaxBackoff = 100 * time.Millisecond
	cfg.ReadTimeout = faultReadTimeout
	return faultEnv{srv: srv, proxy: proxy, bucket: bucket, store: newS3(t, cfg)}
}

func TestS3PutFaults(t *testing.T) {
	env := newFaultEnv(t)
	s := env.store
	const (
		small = 1 << 20
		large = 3*uploader.MinS3PartSize + 12345 // four parts
	)
	before := storetest.Data(42, 2*uploader.MinS3PartSize)
	storetest.Put(t, s, "earlier/object", before)

	for _, tc := range []struct {
		name    string
		size    int
		fault   s3test.FaultFunc
		op      string // operation whose count proves the retry
		minOps  int    // at least this many requests of op
		wantErr error  // nil: the Put succeeds despite the fault
	}{
		{name: "503 on the 2nd UploadPart", size: large, fault: on("UploadPart", 2, s3test.Status(503)), op: "UploadPart", minOps: 5},
		{name: "500 on the 1st UploadPart", size: large, fault: on("UploadPart", 1, s3test.Status(500)), op: "UploadPart", minOps: 5},
		{name: "500 on CreateMultipartUpload", size: large, fault: on("CreateMultipartUpload", 1, s3test.Status(500)), op: "CreateMultipartUpload", minOps: 2},
		{name: "503 on CompleteMultipartUpload", size: large, fault: on("CompleteMultipartUpload", 1, s3test.Status(503)), op: "CompleteMultipartUpload", minOps: 2},
		{name: "500 on PutObject", size: small, fault: on("PutObject", 1, s3test.Status(500)), op: "PutObject", minOps: 2},
		{name: "reset mid UploadPart", size: large, fault: on("UploadPart", 3, s3test.Reset(1<<20)), op: "UploadPart", minOps: 5},
		{name: "reset mid PutObject", size: small, fault: on("PutObject", 1, s3test.Reset(100<<10)), op: "PutObject", minOps: 2},
		{name: "UploadPart stalled past the read timeout", size: large, fault: on("UploadPart", 2, s3test.Stall(time.Minute)), op: "UploadPart", minOps: 5},
		{name: "UploadPart response lost", size: large, fault: on("UploadPart", 2, s3test.Drop()), op: "UploadPart", minOps: 5},
		{name: "PutObject response lost", size: small, fault: on("PutObject", 1, s3test.Drop()), op: "PutObject", minOps: 2},
		{name: "CreateMultipartUpload response lost", size: large, fault: on("CreateMultipartUpload", 1, s3test.Drop()), op: "CreateMultipartUpload", minOps: 2},
		{name: "CompleteMultipartUpload response lost", size: large, fault: on("CompleteMultipartUpload", 1, s3test.Drop()), op: "CompleteMultipartUpload", minOps: 2},
		{name: "HeadObject 503 after the upload", size: small, fault: on("HeadObject", 1, s3test.Status(503)), op: "HeadObject", minOps: 2},

		{name: "UploadPart always 503", size: large, fault: every("UploadPart", s3test.Status(503)), op: "UploadPart", minOps: 4, wantErr: errAny},
		{name: "UploadPart always reset", size: large, fault: every("UploadPart", s3test.Reset(1<<20)), op: "UploadPart", minOps: 4, wantErr: errAny},
		{name: "PutObject always 500", size: small, fault: every("PutObject", s3test.Status(500)), op: "PutObject", minOps: 4, wantErr: errAny},
		{name: "CompleteMultipartUpload always 500", size: large, fault: every("CompleteMultipartUpload", s3test.Status(500)), op: "CompleteMultipartUpload", minOps: 4, wantErr: errAny},
		{name: "CreateMultipartUpload responses always lost", size: large, fault: every("CreateMultipartUpload", s3test.Drop()), op: "CreateMultipartUpload", minOps: 4, wantErr: errAny},
		{name: "UploadPart stalled past the deadline", size: large, fault: every("UploadPart", s3test.Stall(time.Minute)), op: "UploadPart", minOps: 1, wantErr: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "faults/" + strings.ReplaceAll(tc.name, " ", "-")
			content := storetest.Data(uint64(len(tc.name)), tc.size)
			env.proxy.SetFault(tc.fault)
			ctx, cancel := context.WithTimeout(t.Context(), 3*faultReadTimeout)
			defer cancel()
			start := time.Now()
			info, err := s.Put(ctx, key, bytes.NewReader(content), uploader.PutOptions{})
			elapsed := time.Since(start)
			count := env.proxy.Count(tc.op)
			env.proxy.SetFault(nil)
			t.Logf("Put took %v, %d %s requests, error: %v", elapsed.Round(time.Millisecond), count, tc.op, err)

			if count < tc.minOps {
				t.Errorf("%d %s requests; want at least %d (the fault was not hit, or not retried)", count, tc.op, tc.minOps)
			}
			switch {
			case tc.wantErr == nil && err != nil:
				t.Fatalf("Put: %v", err)
			case tc.wantErr == nil:
				if info.Size != int64(tc.size) {
					t.Errorf("Put size %d; want %d", info.Size, tc.size)
				}
				if got := storetest.Read(t, s, key); !bytes.Equal(got, content) {
					t.Errorf("stored %d bytes differ from the %d put", len(got), len(content))
				}
			case err == nil:
				t.Fatalf("Put succeeded; want an error")
			default:
				if tc.wantErr != errAny && !errors.Is(err, tc.wantErr) {
					t.Errorf("Put error %v; want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), env.bucket) {
					t.Errorf("Put error %q does not name bucket and key", err)
				}
				assertNoSecret(t, err, env.srv.SecretKey)
				storetest.AssertMissing(t, s, key)
			}
			assertNoUploads(t, env.srv, env.bucket)
			if got := storetest.Read(t, s, "earlier/object"); !bytes.Equal(got, before) {
				t.Errorf("earlier object changed")
			}
		})
	}
}

// errAny stands for "any error" in tables.
var errAny = errors.New("any error")

func TestS3ReadFaults(t *testing.T) {
	env := newFaultEnv(t)
	s := env.store
	content := storetest.Data(7, 1<<20)
	storetest.Put(t, s, "obj", content)

	t.Run("truncated GET body", func(t *testing.T) {
		for _, n := range []int64{0, 1000, 1<<20 - 1} {
			env.proxy.SetFault(every("GetObject", s3test.Truncate(n)))
			rc, err := s.Get(t.Context(), "obj")
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("reading a body cut after %d bytes: %d bytes, error %v; want io.ErrUnexpectedEOF", n, len(got), err)
			}
			if err != nil && !strings.Contains(err.Error(), "obj") {
				t.Errorf("read error %q does not name the object", err)
			}
		}
		env.proxy.SetFault(nil)
	})

	for _, tc := range []struct {
		name  string
		fault s3test.FaultFunc
		op    string
		do    func(t *testing.T)
	}{
		{"GetObject 500", on("GetObject", 1, s3test.Status(500)), "GetObject", func(t *testing.T) {
			if got := storetest.Read(t, s, "obj"); !bytes.Equal(got, content) {
				t.Error("content differs")
			}
		}},
		{"GetObject reset", on("GetObject", 1, s3test.Reset(0)), "GetObject", func(t *testing.T) {
			if got := storetest.Read(t, s, "obj"); !bytes.Equal(got, content) {
				t.Error("content differs")
			}
		}},
		{"GetObject stalled past the read timeout", on("GetObject", 1, s3test.Stall(time.Minute)), "GetObject", func(t *testing.T) {
			if got := storetest.Read(t, s, "obj"); !bytes.Equal(got, content) {
				t.Error("content differs")
			}
		}},
		{"HeadObject 503", on("HeadObject", 1, s3test.Status(503)), "HeadObject", func(t *testing.T) {
			if st, err := s.Stat(t.Context(), "obj"); err != nil || st.Size != int64(len(content)) {
				t.Errorf("Stat = %+v, %v", st, err)
			}
		}},
		{"ListObjectsV2 500", on("ListObjectsV2", 1, s3test.Status(500)), "ListObjectsV2", func(t *testing.T) {
			if keys := storetest.Keys(t, s, ""); len(keys) != 1 {
				t.Errorf("List = %q", keys)
			}
		}},
		{"DeleteObject 503", on("DeleteObject", 1, s3test.Status(503)), "DeleteObject", func(t *testing.T) {
			storetest.Put(t, s, "gone", []byte("x"))
			if err := s.Delete(t.Context(), "gone"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			storetest.AssertMissing(t, s, "gone")
		}},
	} {
		t.Run(tc.name+" is retried", func(t *testing.T) {
			env.proxy.SetFault(tc.fault)
			tc.do(t)
			if n := env.proxy.Count(tc.op); n < 2 {
				t.Errorf("%d %s requests; want a retry", n, tc.op)
			}
			env.proxy.SetFault(nil)
		})
	}
}

// TestS3NoConditionalWrites: a server that refuses If-None-Match (501)
// fails the Put with a message saying why, rather than storing without the
// guarantee that nothing is overwritten.
func TestS3NoConditionalWrites(t *testing.T) {
	env := newFaultEnv(t)
	env.proxy.SetFault(every("PutObject", s3test.Status(http.StatusNotImplemented)))
	_, err := env.store.Put(t.Context(), "c1/snapshots/x.json", strings.NewReader("{}"), uploader.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "conditional writes") {
		t.Errorf("Put through a server without conditional writes: %v; want an error saying so", err)
	}
}

// TestS3ConfirmPreconditionFailed: when the HEAD that confirms an upload
// finds another object at the key (412 to If-Match: the object was
// replaced since), the Put fails; it used to report that as a success.
func TestS3ConfirmPreconditionFailed(t *testing.T) {
	env := newFaultEnv(t)
	env.proxy.SetFault(on("HeadObject", 1, s3test.Status(http.StatusPreconditionFailed)))
	_, err := env.store.Put(t.Context(), "c1/snapshots/x.db", strings.NewReader("data"), uploader.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "confirm upload") {
		t.Errorf("Put whose confirming HEAD gets 412: %v; want a confirm error", err)
	}
}
