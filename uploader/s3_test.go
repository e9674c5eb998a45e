package uploader_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/google/go-cmp/cmp"

	"github.com/lifeboat-dev/lifeboat/internal/test/s3test"
	"github.com/lifeboat-dev/lifeboat/internal/test/storetest"
	"github.com/lifeboat-dev/lifeboat/uploader"
)

var bucketSeq atomic.Int64

// newBucket creates a fresh bucket on srv.
func newBucket(t testing.TB, srv *s3test.Server, objectLock bool) string {
	t.Helper()
	name := fmt.Sprintf("lifeboat-test-%d", bucketSeq.Add(1))
	srv.CreateBucket(t, name, objectLock)
	return name
}

// testS3Config is a small-part configuration so that tests cross part
// boundaries with little data.
func testS3Config(srv *s3test.Server, endpoint, bucket string) uploader.S3Config {
	return uploader.S3Config{
		Bucket:      bucket,
		Prefix:      "lifeboat/prod",
		Endpoint:    endpoint,
		Region:      srv.Region,
		PathStyle:   true,
		PartSize:    uploader.MinS3PartSize,
		Concurrency: 3,
		MaxAttempts: 4,
		MaxBackoff:  200 * time.Millisecond,
		ReadTimeout: 5 * time.Second,
	}
}

func newS3(t testing.TB, cfg uploader.S3Config) *uploader.S3 {
	t.Helper()
	s, err := uploader.NewS3(t.Context(), cfg, nil)
	if err != nil {
		t.Fatalf("NewS3: %v", err)
	}
	return s
}

// assertNoUploads checks with the raw client that no multipart upload is
// left in bucket.
func assertNoUploads(t *testing.T, srv *s3test.Server, bucket string) {
	t.Helper()
	// Not t.Context(): this also runs in cleanups, after it has ended.
	out, err := srv.Client(t).ListMultipartUploads(context.Background(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatalf("ListMultipartUploads: %v", err)
	}
	for _, u := range out.Uploads {
		t.Errorf("multipart upload left behind: key %s, id %s", aws.ToString(u.Key), aws.ToString(u.UploadId))
	}
}

func TestS3Store(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	storetest.Run(t, func(t *testing.T) uploader.Store {
		bucket := newBucket(t, srv, false)
		// Objects next to the store's prefix must stay invisible to it.
		for _, k := range []string{"lifeboat/prodx", "lifeboat/prod-other/a", "other/key"} {
			_, err := srv.Client(t).PutObject(t.Context(), &s3.PutObjectInput{
				Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader("decoy"),
			})
			if err != nil {
				t.Fatalf("put decoy %s: %v", k, err)
			}
		}
		t.Cleanup(func() {
			if t.Failed() {
				return
			}
			assertNoUploads(t, srv, bucket)
		})
		return newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	})
}

func TestS3String(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	want := "s3://" + bucket + "/lifeboat/prod (" + srv.Endpoint + ")"
	if got := s.String(); got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
}

// TestS3Checksum checks what the store relies on: the server keeps a
// full-object CRC32 for multipart uploads that matches the bytes sent.
func TestS3Checksum(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	for _, tc := range []struct {
		name string
		size int
	}{
		{"single put", 1 << 20},
		{"multipart", 3*uploader.MinS3PartSize + 1234},
	} {
		t.Run(tc.name, func(t *testing.T) {
			content := storetest.Data(9, tc.size)
			key := strings.ReplaceAll(tc.name, " ", "-")
			if _, err := s.Put(t.Context(), key, bytes.NewReader(content), uploader.PutOptions{}); err != nil {
				t.Fatalf("Put: %v", err)
			}
			head, err := srv.Client(t).HeadObject(t.Context(), &s3.HeadObjectInput{
				Bucket: aws.String(bucket), Key: aws.String("lifeboat/prod/" + key), ChecksumMode: types.ChecksumModeEnabled,
			})
			if err != nil {
				t.Fatalf("HeadObject: %v", err)
			}
			var b [4]byte
			binary.BigEndian.PutUint32(b[:], crc32.ChecksumIEEE(content))
			want := base64.StdEncoding.EncodeToString(b[:])
			if got := aws.ToString(head.ChecksumCRC32); got != want {
				t.Errorf("stored CRC32 = %q (type %q); want full-object %q", got, head.ChecksumType, want)
			}
		})
	}
}

func TestParseStoreURL(t *testing.T) {
	for _, tc := range []struct {
		raw            string
		dir            string
		bucket, prefix string
		wantErr        bool
	}{
		{raw: "file:///var/lib/lifeboat/backups", dir: "/var/lib/lifeboat/backups"},
		{raw: "file://backups", wantErr: true},
		{raw: "file://user:pw@host/x", wantErr: true},
		{raw: "ftp://host/x", wantErr: true},
		{raw: "s3://bucket", bucket: "bucket"},
		{raw: "s3://bucket/", bucket: "bucket"},
		{raw: "s3://my.bucket-1/lifeboat", bucket: "my.bucket-1", prefix: "lifeboat"},
		{raw: "s3://bucket/a/b/c/", bucket: "bucket", prefix: "a/b/c"},
		{raw: "s3://bucket/with space+plus", bucket: "bucket", prefix: "with space+plus"},
		{raw: "", wantErr: true},
		{raw: "bucket/prefix", wantErr: true},
		{raw: "S3://bucket", wantErr: true},
		{raw: "s3:/bucket", wantErr: true},
		{raw: "s3://", wantErr: true},
		{raw: "s3:///prefix", wantErr: true},
		{raw: "s3://ab", wantErr: true},
		{raw: "s3://Bucket", wantErr: true},
		{raw: "s3://bucket_underscore", wantErr: true},
		{raw: "s3://-bucket", wantErr: true},
		{raw: "s3://bucket-", wantErr: true},
		{raw: "s3://a..b", wantErr: true},
		{raw: "s3://192.168.1.1", wantErr: true},
		{raw: "s3://user:secret@bucket/p", wantErr: true},
		{raw: "s3://bucket:9000/p", wantErr: true},
		{raw: "s3://bucket//p", wantErr: true},
		{raw: "s3://bucket/a//b", wantErr: true},
		{raw: "s3://bucket/../etc", wantErr: true},
		{raw: "s3://bucket/a/./b", wantErr: true},
		{raw: "s3://bucket/p?versionId=1", wantErr: true},
		{raw: "s3://bucket/p#frag", wantErr: true},
		{raw: "s3://bucket/p\x00q", wantErr: true},
		{raw: "s3://bucket/p\\q", wantErr: true},
		{raw: "s3://" + strings.Repeat("b", 64), wantErr: true},
	} {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := uploader.ParseStoreURL(tc.raw)
			if (err != nil) != tc.wantErr {
				t.Fatalf("ParseStoreURL(%q) = %+v, %v; want error %v", tc.raw, got, err, tc.wantErr)
			}
			if err != nil && strings.Contains(err.Error(), "secret@") || err != nil && strings.Contains(err.Error(), "pw@") {
				t.Errorf("ParseStoreURL(%q) error shows the credentials: %v", tc.raw, err)
			}
			want := uploader.StoreURL{Dir: tc.dir, Bucket: tc.bucket, Prefix: tc.prefix}
			switch {
			case err != nil:
				want = uploader.StoreURL{}
			case tc.dir != "":
				want.Scheme = "file"
			default:
				want.Scheme = "s3"
			}
			if got != want {
				t.Errorf("ParseStoreURL(%q) = %+v; want %+v", tc.raw, got, want)
			}
		})
	}
}

func FuzzParseStoreURL(f *testing.F) {
	for _, s := range []string{
		"s3://bucket", "s3://bucket/", "s3://bucket/a/b/", "s3://my.bucket-1/x y",
		"s3://bucket//a", "s3://a..b/c", "s3://bucket/../x", "s3://192.168.0.1/x",
		"s3://bucket/p?q#f", "s3://user:pw@bucket/p", "", "s3://", "file:///tmp", "file://rel", "file://u:p@h/x", "s3://k:secret@bucket/p", "ftp://x",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := uploader.ParseStoreURL(raw)
		host := raw
		if _, rest, ok := strings.Cut(host, "://"); ok {
			host = rest
		}
		host, _, _ = strings.Cut(host, "/")
		if strings.Contains(host, "@") && (err == nil || strings.Contains(err.Error(), raw)) {
			t.Fatalf("ParseStoreURL(%q) = %v: credentials accepted or echoed", raw, err)
		}
		if err != nil {
			if u != (uploader.StoreURL{}) {
				t.Fatalf("ParseStoreURL(%q) = %+v with error %v", raw, u, err)
			}
			return
		}
		if u.Scheme == "file" {
			if !strings.HasPrefix(u.Dir, "/") || u.Bucket != "" || u.Prefix != "" {
				t.Fatalf("ParseStoreURL(%q) = %+v", raw, u)
			}
			return
		}
		bucket, prefix := u.Bucket, u.Prefix
		if strings.HasPrefix(prefix, "/") || strings.HasSuffix(prefix, "/") || strings.Contains(prefix, "//") {
			t.Fatalf("ParseStoreURL(%q) prefix %q has stray slashes", raw, prefix)
		}
		// A parsed URL survives formatting and parsing again.
		again := "s3://" + bucket
		if prefix != "" {
			again += "/" + prefix
		}
		u2, err := uploader.ParseStoreURL(again)
		if err != nil || u2 != u {
			t.Fatalf("round trip of %q via %q = %+v, %v", raw, again, u2, err)
		}
		// And it is a valid configuration.
		if err := (uploader.S3Config{Bucket: bucket, Prefix: prefix}).Validate(); err != nil {
			t.Fatalf("ParseStoreURL(%q) = %q, %q, which Validate rejects: %v", raw, bucket, prefix, err)
		}
	})
}

func TestS3ConfigValidate(t *testing.T) {
	ok := uploader.S3Config{Bucket: "bucket"}
	for _, tc := range []struct {
		name    string
		mutate  func(*uploader.S3Config)
		wantKey string // "" for valid
	}{
		{"minimal", func(*uploader.S3Config) {}, ""},
		{"everything", func(c *uploader.S3Config) {
			*c = uploader.S3Config{Bucket: "b-1", Prefix: "a/b", Endpoint: "https://minio.local:9000/", Region: "eu-west-1",
				PathStyle: true, SSE: "aws:kms", SSEKMSKeyID: "arn:aws:kms:eu-west-1:1:key/x", StorageClass: "STANDARD_IA",
				PartSize: 64 << 20, Concurrency: 8, CreateBucket: true, MaxAttempts: 3, MaxBackoff: time.Minute,
				ReadTimeout: time.Minute, Profile: "backup"}
		}, ""},
		{"no bucket", func(c *uploader.S3Config) { c.Bucket = "" }, "s3.bucket"},
		{"bad bucket", func(c *uploader.S3Config) { c.Bucket = "Bad_Bucket" }, "s3.bucket"},
		{"bad prefix", func(c *uploader.S3Config) { c.Prefix = "a/../b" }, "s3.prefix"},
		{"endpoint without scheme", func(c *uploader.S3Config) { c.Endpoint = "127.0.0.1:9000" }, "s3.endpoint"},
		{"endpoint ftp", func(c *uploader.S3Config) { c.Endpoint = "ftp://host" }, "s3.endpoint"},
		{"endpoint no host", func(c *uploader.S3Config) { c.Endpoint = "http://" }, "s3.endpoint"},
		{"endpoint path", func(c *uploader.S3Config) { c.Endpoint = "http://host/bucket" }, "s3.endpoint"},
		{"endpoint bad port", func(c *uploader.S3Config) { c.Endpoint = "http://host:port" }, "s3.endpoint"},
		{"endpoint user info", func(c *uploader.S3Config) { c.Endpoint = "http://key:hunter2@host" }, "s3.endpoint"},
		{"region", func(c *uploader.S3Config) { c.Region = "EU West" }, "s3.region"},
		{"sse", func(c *uploader.S3Config) { c.SSE = "aes256" }, "s3.sse"},
		{"kms key without kms", func(c *uploader.S3Config) { c.SSE = "AES256"; c.SSEKMSKeyID = "k" }, "s3.sse_kms_key_id"},
		{"storage class", func(c *uploader.S3Config) { c.StorageClass = "glacier deep" }, "s3.storage_class"},
		{"part size small", func(c *uploader.S3Config) { c.PartSize = 1 << 20 }, "s3.part_size"},
		{"part size huge", func(c *uploader.S3Config) { c.PartSize = 6 << 30 }, "s3.part_size"},
		{"concurrency", func(c *uploader.S3Config) { c.Concurrency = -1 }, "s3.concurrency"},
		{"attempts", func(c *uploader.S3Config) { c.MaxAttempts = 1000 }, "s3.max_attempts"},
		{"backoff", func(c *uploader.S3Config) { c.MaxBackoff = -time.Second }, "s3.max_backoff"},
		{"read timeout", func(c *uploader.S3Config) { c.ReadTimeout = -time.Second }, "s3.read_timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.mutate(&c)
			err := c.Validate()
			if tc.wantKey == "" {
				if err != nil {
					t.Fatalf("Validate() = %v; want nil", err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tc.wantKey+":") {
				t.Fatalf("Validate() = %v; want an error naming %s", err, tc.wantKey)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Validate() error %q shows the password in the URL", err)
			}
		})
	}
}

func TestS3ConfigDefaults(t *testing.T) {
	got := uploader.S3Config{Bucket: "b", Prefix: "/p/"}.WithDefaults()
	want := uploader.S3Config{Bucket: "b", Prefix: "p", PartSize: 5 << 20, Concurrency: 3, MaxAttempts: 8,
		MaxBackoff: 20 * time.Second, ReadTimeout: 2 * time.Minute}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("WithDefaults (-want +got):\n%s", diff)
	}
}

// assertNoSecret fails when err shows secret.
func assertNoSecret(t *testing.T, err error, secret string) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("error shows the secret key: %v", err)
	}
}

func TestNewS3Errors(t *testing.T) {
	srv := s3test.Start(t)
	bucket := newBucket(t, srv, false)
	down := s3test.Start(t)
	down.Stop()

	for _, tc := range []struct {
		name       string
		access     string
		secret     string
		mutate     func(*uploader.S3Config)
		wantInErr  []string // "" entries: expect success
		wantSucces bool
	}{
		{
			name: "wrong secret key", access: srv.AccessKey, secret: "not-the-secret-" + srv.SecretKey,
			wantInErr: []string{bucket, "secret key does not match"},
		},
		{
			name: "unknown access key", access: "no-such-access-key", secret: srv.SecretKey,
			wantInErr: []string{bucket, "does not know the access key"},
		},
		{
			name: "missing bucket", access: srv.AccessKey, secret: srv.SecretKey,
			mutate:    func(c *uploader.S3Config) { c.Bucket = "no-such-bucket" },
			wantInErr: []string{`"no-such-bucket" does not exist`, "--s3-create-bucket"},
		},
		{
			name: "missing bucket created", access: srv.AccessKey, secret: srv.SecretKey,
			mutate:     func(c *uploader.S3Config) { c.Bucket = "created-on-demand"; c.CreateBucket = true },
			wantSucces: true,
		},
		{
			name: "existing bucket with create", access: srv.AccessKey, secret: srv.SecretKey,
			mutate:     func(c *uploader.S3Config) { c.CreateBucket = true },
			wantSucces: true,
		},
		{
			name: "malformed endpoint", access: srv.AccessKey, secret: srv.SecretKey,
			mutate:    func(c *uploader.S3Config) { c.Endpoint = "127.0.0.1:9000" },
			wantInErr: []string{"s3.endpoint", "malformed URL"},
		},
		{
			name: "endpoint with credentials", access: srv.AccessKey, secret: srv.SecretKey,
			mutate: func(c *uploader.S3Config) {
				c.Endpoint = strings.Replace(srv.Endpoint, "//", "//"+srv.AccessKey+":"+srv.SecretKey+"@", 1)
			},
			wantInErr: []string{"s3.endpoint", "credentials in the URL"},
		},
		{
			name: "unreachable endpoint", access: srv.AccessKey, secret: srv.SecretKey,
			mutate:    func(c *uploader.S3Config) { c.Endpoint = down.Endpoint },
			wantInErr: []string{bucket, "unreachable", down.Endpoint},
		},
		{
			name: "no credentials", access: "", secret: "",
			wantInErr: []string{bucket, "credentials"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s3test.Env(t, tc.access, tc.secret)
			cfg := testS3Config(srv, srv.Endpoint, bucket)
			if tc.mutate != nil {
				tc.mutate(&cfg)
			}
			s, err := uploader.NewS3(t.Context(), cfg, nil)
			assertNoSecret(t, err, srv.SecretKey)
			if tc.wantSucces {
				if err != nil {
					t.Fatalf("NewS3: %v", err)
				}
				if _, err := srv.Client(t).HeadBucket(t.Context(), &s3.HeadBucketInput{Bucket: aws.String(cfg.Bucket)}); err != nil {
					t.Errorf("bucket %s after NewS3: %v", cfg.Bucket, err)
				}
				if _, err := s.Put(t.Context(), "k", strings.NewReader("v"), uploader.PutOptions{}); err != nil {
					t.Errorf("Put: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("NewS3 succeeded; want an error containing %q", tc.wantInErr)
			}
			t.Logf("NewS3 error: %v", err)
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("NewS3 error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestS3Region records what is observable about regions with versitygw: it
// serves one region and rejects requests signed for another, which NewS3
// reports as a region problem. (AWS answers a HeadBucket in the wrong region
// with a redirect and the bucket's region in X-Amz-Bucket-Region, which
// NewS3 turns into "the bucket is in region X"; versitygw does not.)
func TestS3Region(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)

	t.Run("from environment", func(t *testing.T) {
		t.Setenv("AWS_REGION", srv.Region)
		cfg := testS3Config(srv, srv.Endpoint, bucket)
		cfg.Region = ""
		newS3(t, cfg)
	})
	t.Run("default when unset", func(t *testing.T) {
		cfg := testS3Config(srv, srv.Endpoint, bucket)
		cfg.Region = ""
		newS3(t, cfg) // us-east-1, the server's region
	})
	t.Run("wrong region", func(t *testing.T) {
		cfg := testS3Config(srv, srv.Endpoint, bucket)
		cfg.Region = "eu-central-1"
		_, err := uploader.NewS3(t.Context(), cfg, nil)
		if err == nil {
			t.Fatal("NewS3 with the wrong region succeeded")
		}
		t.Logf("NewS3 error: %v", err)
		for _, want := range []string{bucket, "region"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("NewS3 error %q does not contain %q", err, want)
			}
		}
	})
}

func TestS3ObjectLock(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, true)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	client := srv.Client(t)
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)

	for _, tc := range []struct {
		name string
		size int
		opts uploader.PutOptions
	}{
		{"governance", 1000, uploader.PutOptions{LockMode: "GOVERNANCE", RetainUntil: until}},
		{"compliance multipart", 2*uploader.MinS3PartSize + 1, uploader.PutOptions{LockMode: "COMPLIANCE", RetainUntil: until}},
		{"legal hold", 1000, uploader.PutOptions{LegalHold: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "locked/" + strings.ReplaceAll(tc.name, " ", "-")
			info, err := s.Put(t.Context(), key, bytes.NewReader(storetest.Data(1, tc.size)), tc.opts)
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			st, err := s.Stat(t.Context(), key)
			if err != nil {
				t.Fatalf("Stat: %v", err)
			}
			want := uploader.ObjectInfo{Key: key, Size: int64(tc.size), LockMode: tc.opts.LockMode, LegalHold: tc.opts.LegalHold}
			if tc.opts.LockMode != "" {
				want.RetainUntil = until
			}
			opt := cmp.Comparer(func(a, b time.Time) bool { return a.Equal(b) })
			for name, got := range map[string]uploader.ObjectInfo{"Put": info, "Stat": st} {
				got.ModTime, got.SHA256 = time.Time{}, ""
				if diff := cmp.Diff(want, got, opt); diff != "" {
					t.Errorf("%s info (-want +got):\n%s", name, diff)
				}
			}
			if !st.Locked(time.Now()) {
				t.Errorf("Stat = %+v: not Locked", st)
			}

			// Deleting the version itself is what Object Lock refuses.
			full := "lifeboat/prod/" + key
			vs, err := client.ListObjectVersions(t.Context(), &s3.ListObjectVersionsInput{Bucket: aws.String(bucket), Prefix: aws.String(full)})
			if err != nil || len(vs.Versions) != 1 {
				t.Fatalf("ListObjectVersions = %+v, %v; want one version", vs, err)
			}
			version := vs.Versions[0].VersionId
			_, err = client.DeleteObject(t.Context(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(full), VersionId: version})
			if err == nil {
				t.Fatalf("deleting locked version %s succeeded", aws.ToString(version))
			}

			// Delete without a version only adds a delete marker: the key is
			// gone from the store's view, the locked data stays.
			if err := s.Delete(t.Context(), key); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			storetest.AssertMissing(t, s, key)
			got, err := client.GetObject(t.Context(), &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(full), VersionId: version})
			if err != nil {
				t.Fatalf("locked version after Delete: %v", err)
			}
			b, err := io.ReadAll(got.Body)
			got.Body.Close()
			if err != nil || !bytes.Equal(b, storetest.Data(1, tc.size)) {
				t.Errorf("locked version after Delete: %d bytes, %v; want the original content", len(b), err)
			}
		})
	}
}

func TestS3LockWithoutObjectLock(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	for _, tc := range []struct {
		name string
		size int
		opts uploader.PutOptions
	}{
		{"mode", 1000, uploader.PutOptions{LockMode: "GOVERNANCE", RetainUntil: time.Now().Add(time.Hour)}},
		{"mode multipart", 2*uploader.MinS3PartSize + 1, uploader.PutOptions{LockMode: "COMPLIANCE", RetainUntil: time.Now().Add(time.Hour)}},
		{"legal hold", 1000, uploader.PutOptions{LegalHold: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := strings.ReplaceAll(tc.name, " ", "-")
			_, err := s.Put(t.Context(), key, bytes.NewReader(storetest.Data(1, tc.size)), tc.opts)
			if err == nil {
				t.Fatal("Put with Object Lock options into a bucket without Object Lock succeeded")
			}
			for _, want := range []string{bucket, key, "no Object Lock configuration"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Put error %q does not contain %q", err, want)
				}
			}
			storetest.AssertMissing(t, s, key)
			assertNoUploads(t, srv, bucket)
		})
	}
}

func TestS3IncompleteUploads(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	s := newS3(t, testS3Config(srv, srv.Endpoint, bucket))
	client := srv.Client(t)
	start := func(key string) string {
		out, err := client.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatalf("CreateMultipartUpload(%s): %v", key, err)
		}
		return aws.ToString(out.UploadId)
	}
	id := start("lifeboat/prod/c/snapshots/orphan.db.zst")
	other := start("elsewhere/orphan")

	if ups, err := s.ListIncompleteUploads(t.Context(), time.Now().Add(-time.Hour)); err != nil || len(ups) != 0 {
		t.Errorf("ListIncompleteUploads(an hour ago) = %+v, %v; want none", ups, err)
	}
	ups, err := s.ListIncompleteUploads(t.Context(), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatalf("ListIncompleteUploads: %v", err)
	}
	if len(ups) != 1 || ups[0].Key != "c/snapshots/orphan.db.zst" || ups[0].UploadID != id || ups[0].Initiated.IsZero() {
		t.Fatalf("ListIncompleteUploads = %+v; want only c/snapshots/orphan.db.zst %s", ups, id)
	}
	for range 2 { // idempotent
		if err := s.AbortIncomplete(t.Context(), ups[0].Key, ups[0].UploadID); err != nil {
			t.Fatalf("AbortIncomplete: %v", err)
		}
	}
	if ups, err := s.ListIncompleteUploads(t.Context(), time.Now().Add(time.Hour)); err != nil || len(ups) != 0 {
		t.Errorf("after AbortIncomplete: %+v, %v; want none", ups, err)
	}
	out, err := client.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
	if err != nil || len(out.Uploads) != 1 || aws.ToString(out.Uploads[0].UploadId) != other {
		t.Errorf("uploads outside the prefix = %+v, %v; want %s untouched", out, err, other)
	}
}

// TestS3ServerDown stops the server under a working store: operations fail
// after the bounded retries, naming the object, and do not hang.
func TestS3ServerDown(t *testing.T) {
	srv := s3test.Start(t)
	srv.Env(t)
	bucket := newBucket(t, srv, false)
	cfg := testS3Config(srv, srv.Endpoint, bucket)
	cfg.MaxAttempts = 2
	s := newS3(t, cfg)
	srv.Stop()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := s.Put(ctx, "snapshots/a.db", bytes.NewReader(storetest.Data(1, 1000)), uploader.PutOptions{})
	if err == nil || !strings.Contains(err.Error(), "snapshots/a.db") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Put with the server down = %v; want a connection error naming the key", err)
	}
	if _, err := s.Stat(ctx, "snapshots/a.db"); err == nil || errors.Is(err, uploader.ErrNotFound) {
		t.Errorf("Stat with the server down = %v; want a connection error, not ErrNotFound", err)
	}
	if err := s.List(ctx, "", func(uploader.ObjectInfo) error { return nil }); err == nil {
		t.Error("List with the server down succeeded")
	}
	assertNoSecret(t, err, srv.SecretKey)
}
