package uploader

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/aws/smithy-go/logging"
	"hash"
	"hash/crc32"
	"io"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager"
	tmtypes "github.com/aws/aws-sdk-go-v2/feature/s3/transfermanager/types"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Defaults and limits of S3Config.
const (
	// DefaultS3PartSize and DefaultS3Concurrency keep a Put's buffers,
	// (Concurrency+2) × PartSize, at 25 MiB: the peak RSS of a backup to S3
	// with age is 84 MiB instead of 104 MiB with 8 MiB parts, 4 at once
	// (issue 24, docs/benchmarks.md). Three parts in flight outrun the
	// encoder's output (zstd on one thread makes 50–80 MB/s of object); 5
	// MiB parts, S3's minimum, still allow objects of 48 GiB, six times
	// etcd's largest database.
	DefaultS3PartSize    = 5 << 20
	MinS3PartSize        = 5 << 20 // S3's minimum for every part but the last
	MaxS3PartSize        = 5 << 30 // S3's maximum part size
	DefaultS3Concurrency = 3
	DefaultS3MaxAttempts = 8
	DefaultS3MaxBackoff  = 20 * time.Second
	DefaultS3ReadTimeout = 2 * time.Minute
	DefaultS3Region      = "us-east-1"
)

// abortTimeout bounds the clean-up of a failed upload, which runs on a fresh
// context so that it also happens when the caller's context has ended.
const abortTimeout = 30 * time.Second

// S3Config configures an S3-compatible store. The zero value of every field
// but Bucket means "default" (see WithDefaults).
type S3Config struct {
	// Bucket and Prefix locate the store: s3://Bucket/Prefix (see
	// ParseStoreURL). Prefix is a slash-separated key prefix without leading or
	// trailing slash; empty means the bucket's root.
	Bucket string
	Prefix string
	// Endpoint is the base URL of an S3-compatible service
	// (http(s)://host[:port]). Empty uses the SDK's resolution:
	// AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, shared config, else AWS.
	Endpoint string
	// Region signs requests. Empty uses the SDK chain (AWS_REGION, shared
	// config, ...) and falls back to us-east-1.
	Region string
	// PathStyle addresses buckets as http://host/bucket instead of
	// http://bucket.host (most S3-compatible servers want it).
	PathStyle bool
	// SSE is the server-side encryption to request: "", "AES256" or
	// "aws:kms". SSEKMSKeyID names the KMS key for "aws:kms" (empty: the
	// bucket's or AWS's default key).
	SSE         string
	SSEKMSKeyID string
	// StorageClass of new objects (e.g. STANDARD_IA); empty is the bucket's
	// default.
	StorageClass string
	// PartSize is the multipart part size in bytes, between 5 MiB and 5 GiB
	// (default 5 MiB). Objects smaller than one part go up in one PutObject.
	PartSize int64
	// Concurrency is the number of parts uploaded at once (default 3). A Put
	// holds at most (Concurrency+2) × PartSize bytes of buffers.
	Concurrency int
	// CreateBucket creates the bucket when it does not exist; otherwise a
	// missing bucket is an error.
	CreateBucket bool
	// ObjectLock says objects will be written with Object Lock: a bucket
	// that CreateBucket creates has Object Lock enabled.
	ObjectLock bool
	// MaxAttempts is how often one request is tried (default 8), and
	// MaxBackoff caps the exponential backoff with jitter between attempts
	// (default 20s). Throttling, 5xx, timeouts and connection errors are
	// retried, each request (each part) on its own.
	MaxAttempts int
	MaxBackoff  time.Duration
	// ReadTimeout fails a request whose connection delivers no data for this
	// long, so that a stalled server is retried instead of hanging (default
	// 2m). It must exceed the time to send one part.
	ReadTimeout time.Duration
	// Profile selects a shared config profile (empty: AWS_PROFILE or
	// "default").
	Profile string
}

// WithDefaults returns c with every unset field at its default. Region stays
// empty: it is resolved by the SDK chain in NewS3.
func (c S3Config) WithDefaults() S3Config {
	c.Prefix = strings.Trim(c.Prefix, "/")
	if c.PartSize == 0 {
		c.PartSize = DefaultS3PartSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultS3Concurrency
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultS3MaxAttempts
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultS3MaxBackoff
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = DefaultS3ReadTimeout
	}
	return c
}

var (
	regionRE       = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*[a-z0-9]$`)
	storageClassRE = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
)

// Validate reports the first invalid field, naming its config key
// (s3.bucket, s3.part_size, ...). Zero values are valid: they mean default.
func (c S3Config) Validate() error {
	if err := validBucket(c.Bucket); err != nil {
		return fmt.Errorf("s3.bucket: %w", err)
	}
	if err := validPrefix(c.Prefix); err != nil {
		return fmt.Errorf("s3.prefix: %w", err)
	}
	if c.Endpoint != "" {
		if err := validEndpoint(c.Endpoint); err != nil {
			return fmt.Errorf("s3.endpoint: %w", err)
		}
	}
	if c.Region != "" && !regionRE.MatchString(c.Region) {
		return fmt.Errorf("s3.region: %q is not a region name (like us-east-1)", c.Region)
	}
	switch c.SSE {
	case "", string(types.ServerSideEncryptionAes256), string(types.ServerSideEncryptionAwsKms):
	default:
		return fmt.Errorf("s3.sse: %q is not one of \"\", AES256, aws:kms", c.SSE)
	}
	if c.SSEKMSKeyID != "" && c.SSE != string(types.ServerSideEncryptionAwsKms) {
		return errors.New("s3.sse_kms_key_id: set only with s3.sse aws:kms")
	}
	if c.StorageClass != "" && !storageClassRE.MatchString(c.StorageClass) {
		return fmt.Errorf("s3.storage_class: %q is not a storage class (like STANDARD_IA)", c.StorageClass)
	}
	if c.PartSize != 0 && (c.PartSize < MinS3PartSize || c.PartSize > MaxS3PartSize) {
		return fmt.Errorf("s3.part_size: %d is outside [%d, %d] bytes (5 MiB to 5 GiB)", c.PartSize, MinS3PartSize, MaxS3PartSize)
	}
	if c.Concurrency < 0 || c.Concurrency > 64 {
		return fmt.Errorf("s3.concurrency: %d is outside [1, 64]", c.Concurrency)
	}
	if c.MaxAttempts < 0 || c.MaxAttempts > 100 {
		return fmt.Errorf("s3.max_attempts: %d is outside [1, 100]", c.MaxAttempts)
	}
	if c.MaxBackoff < 0 || c.MaxBackoff > 10*time.Minute {
		return fmt.Errorf("s3.max_backoff: %v is outside (0, 10m]", c.MaxBackoff)
	}
	if c.ReadTimeout < 0 {
		return fmt.Errorf("s3.read_timeout: %v is negative", c.ReadTimeout)
	}
	return nil
}

// validEndpoint checks an endpoint URL without ever echoing it whole: a URL
// may carry credentials in its user info.
func validEndpoint(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // without the URL itself
		}
		return fmt.Errorf("malformed URL (want http(s)://host[:port]): %w", err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("malformed URL: scheme %q, want http or https", u.Scheme)
	case u.User != nil:
		return errors.New("malformed URL: credentials in the URL are not allowed (use the AWS credential chain)")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("malformed URL: no host (want http(s)://host[:port])")
	case u.RawQuery != "" || u.Fragment != "":
		return errors.New("malformed URL: query or fragment not allowed")
	case u.Path != "" && u.Path != "/":
		return fmt.Errorf("malformed URL: path %q not allowed (the bucket goes in s3://bucket/prefix)", u.Path)
	}
	if p := u.Port(); p != "" {
		for _, r := range p {
			if r < '0' || r > '9' {
				return fmt.Errorf("malformed URL: port %q", p)
			}
		}
	}
	return nil
}

// S3 is a Store in an S3-compatible bucket under a key prefix.
//
// Put streams the object with the SDK's transfer manager, one PutObject for
// objects smaller than a part and a multipart upload otherwise, with CRC32
// checksums (full-object for multipart) checked by the server, and confirms
// size and checksum with a HeadObject afterwards.
//
// In a versioned bucket (Object Lock requires one) Delete without a version
// only adds a delete marker: the data stays, and stays locked, until a
// lifecycle rule expires noncurrent versions.
type S3 struct {
	client   *s3.Client
	tmOpts   func(*transfermanager.Options)
	cfg      S3Config
	prefix   string // Prefix with a trailing slash, or empty
	endpoint string // for String
	lg       *slog.Logger

	// lockOK is set once the bucket is known to have Object Lock enabled
	// (it cannot be turned off again).
	lockOK atomic.Bool
}

var _ Store = (*S3)(nil)

// NewS3 loads the AWS SDK's default configuration chain (environment,
// shared config and credentials files, web identity / IRSA, container and
// EC2 instance roles), applies cfg on top and checks that the bucket is
// reachable (HeadBucket), creating it when cfg.CreateBucket is set. Its
// errors say what is wrong: malformed endpoint, unreachable endpoint, wrong
// credentials, missing bucket, wrong region.
func NewS3(ctx context.Context, cfg S3Config, lg *slog.Logger) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if lg == nil {
		lg = slog.New(slog.DiscardHandler)
	}
	opts := []func(*config.LoadOptions) error{
		// The SDK's own warnings (e.g. the instance metadata fallback)
		// go to lifeboat's log, not raw to stderr.
		config.WithLogger(sdkLogger{lg}),
		config.WithRetryer(func() aws.Retryer { return newRetryer(cfg) }),
		config.WithHTTPClient(awshttp.NewBuildableClient().WithReadTimeout(cfg.ReadTimeout)),
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load aws configuration for s3://%s: %w", cfg.Bucket, err)
	}
	if awsCfg.Region == "" {
		awsCfg.Region = DefaultS3Region
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
	})
	s := &S3{
		client: client,
		tmOpts: func(o *transfermanager.Options) {
			o.PartSizeBytes = cfg.PartSize
			// Buffer no more than one part before choosing between
			// PutObject and a multipart upload.
			o.MultipartUploadThreshold = cfg.PartSize
			o.Concurrency = cfg.Concurrency
			o.ChecksumAlgorithm = tmtypes.ChecksumAlgorithmCrc32
			// Abort on a fresh context: a canceled Put must not leave an
			// upload behind.
			o.FailTimeout = abortTimeout
		},
		cfg: cfg,
		lg:  lg,
	}
	s.cfg.Region = awsCfg.Region
	if cfg.Prefix != "" {
		s.prefix = cfg.Prefix + "/"
	}
	if ep := client.Options().BaseEndpoint; ep != nil {
		s.endpoint = *ep
	} else {
		s.endpoint = "aws " + awsCfg.Region
	}
	if err := s.checkBucket(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

func newRetryer(cfg S3Config) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = cfg.MaxAttempts
		o.MaxBackoff = cfg.MaxBackoff
		o.Backoff = retry.NewExponentialJitterBackoff(cfg.MaxBackoff)
		// The client-side retry quota exists to protect a shared service
		// from fleets of clients; one backup job retrying its own parts is
		// bounded by MaxAttempts already, and running out of quota half-way
		// through a long outage would fail uploads that could succeed.
		o.RateLimiter = ratelimit.None
	})
}

// String describes the store: s3://bucket/prefix (endpoint).
func (s *S3) String() string {
	u := "s3://" + s.cfg.Bucket
	if s.cfg.Prefix != "" {
		u += "/" + s.cfg.Prefix
	}
	return u + " (" + s.endpoint + ")"
}

// name is an object's URL for errors.
func (s *S3) name(fullKey string) string {
	return "s3://" + s.cfg.Bucket + "/" + fullKey
}

// checkBucket makes sure the bucket exists and is usable with the loaded
// credentials and region.
func (s *S3) checkBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)}, probeOptions)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return fmt.Errorf("check s3 bucket %q: %w", s.cfg.Bucket, err)
	}
	var send *smithyhttp.RequestSendError
	var re *awshttp.ResponseError
	switch {
	case isCredentialsError(err):
		return fmt.Errorf("check s3 bucket %q: no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, a profile, or web identity): %w", s.cfg.Bucket, err)
	case errors.As(err, &send) || !errors.As(err, &re) || re.HTTPStatusCode() == 0:
		return fmt.Errorf("check s3 bucket %q: endpoint %s unreachable: %w", s.cfg.Bucket, s.endpoint, err)
	}
	if region := re.Response.Header.Get("X-Amz-Bucket-Region"); region != "" && region != s.cfg.Region {
		return fmt.Errorf("check s3 bucket %q: the bucket is in region %s, not %s (set --s3-region %s): %w", s.cfg.Bucket, region, s.cfg.Region, region, err)
	}
	// HEAD responses have no body, so the reason is unknown (and servers
	// differ: versitygw answers 404 to an unknown access key). A GET says
	// which of bucket, key, secret, permission or region is wrong.
	_, lerr := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket:  aws.String(s.cfg.Bucket),
		Prefix:  aws.String(s.prefix),
		MaxKeys: aws.Int32(1),
	}, probeOptions)
	if lerr == nil {
		return nil // listing works, which is what the store needs
	}
	var ae smithy.APIError
	code := ""
	if errors.As(lerr, &ae) {
		code = ae.ErrorCode()
	}
	switch {
	case code == "NoSuchBucket" || code == "" && re.HTTPStatusCode() == 404:
		if !s.cfg.CreateBucket {
			return fmt.Errorf("s3 bucket %q does not exist at %s (create it, or pass --s3-create-bucket): %w", s.cfg.Bucket, s.endpoint, lerr)
		}
		return s.createBucket(ctx)
	case code == "InvalidAccessKeyId" || code == "XAdminUserNotFound":
		return fmt.Errorf("check s3 bucket %q: %s does not know the access key (check AWS_ACCESS_KEY_ID or the profile): %w", s.cfg.Bucket, s.endpoint, lerr)
	case code == "SignatureDoesNotMatch":
		return fmt.Errorf("check s3 bucket %q: signature rejected, the secret key does not match the access key (check AWS_SECRET_ACCESS_KEY or the profile): %w", s.cfg.Bucket, lerr)
	case code == "AuthorizationHeaderMalformed" || code == "IncorrectEndpoint" || code == "PermanentRedirect" ||
		re.HTTPStatusCode() == 301 || re.HTTPStatusCode() == 307:
		return fmt.Errorf("check s3 bucket %q: request rejected, the bucket or endpoint is probably in another region than %s (set --s3-region): %w", s.cfg.Bucket, s.cfg.Region, lerr)
	case code == "AccessDenied" || code == "AllAccessDisabled":
		return fmt.Errorf("check s3 bucket %q: access denied, the credentials lack permission on the bucket (s3:ListBucket, s3:GetObject, s3:PutObject, s3:DeleteObject): %w", s.cfg.Bucket, lerr)
	}
	return fmt.Errorf("check s3 bucket %q at %s: %w", s.cfg.Bucket, s.endpoint, lerr)
}

// probeOptions keeps start-up checks quick: a wrong endpoint should fail
// in seconds, not after the full retry budget.
func probeOptions(o *s3.Options) {
	o.Retryer = retry.AddWithMaxAttempts(o.Retryer, 3)
}

func isCredentialsError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "failed to retrieve credentials") ||
		strings.Contains(msg, "failed to refresh cached credentials") ||
		strings.Contains(msg, "no EC2 IMDS role found")
}

func (s *S3) createBucket(ctx context.Context) error {
	in := &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)}
	if s.cfg.Region != DefaultS3Region {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(s.cfg.Region),
		}
	}
	s.objectLockEnabled(in)
	_, err := s.client.CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("create s3 bucket %q at %s: %w", s.cfg.Bucket, s.endpoint, err)
	}
	s.lg.Info("created s3 bucket", "bucket", s.cfg.Bucket, "endpoint", s.endpoint, "object_lock", s.cfg.ObjectLock)
	return nil
}

// Put uploads r to key; see Store. The returned ObjectInfo carries the
// sha256 of the bytes read from r and the Object Lock state the server
// reports. Three steps: the request, the upload, the confirmation.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, opts PutOptions) (ObjectInfo, error) {
	full := s.prefix + key
	if err := validKey(key); err != nil {
		return ObjectInfo{}, fmt.Errorf("upload %s: %w", s.name(full), err)
	}
	if err := opts.Validate(); err != nil {
		return ObjectInfo{}, fmt.Errorf("upload %s: %w", s.name(full), err)
	}
	body := &putReader{ctx: ctx, r: r, sha: sha256.New(), crc: crc32.NewIEEE()}
	token := randomToken()
	in, err := s.uploadInput(ctx, full, body, token, opts)
	if err != nil {
		return ObjectInfo{}, fmt.Errorf("upload %s: %w", s.name(full), err)
	}
	versionID, etag, err := s.upload(ctx, full, in, token, opts)
	if err != nil {
		return ObjectInfo{}, err
	}
	s.lg.Debug("upload completed", "object", s.name(full), "bytes", body.n)
	if body.err != nil {
		// Cannot happen: the transfer manager stops at the first error.
		return ObjectInfo{}, fmt.Errorf("upload %s: %w", s.name(full), body.err)
	}
	return s.confirm(ctx, key, full, body, token, versionID, etag)
}

// uploadInput is the transfer manager's request for one Put: a CRC32 of
// the whole object, create-only, the put token, and the Object Lock
// settings (refused before anything is sent when the bucket has no Object
// Lock).
func (s *S3) uploadInput(ctx context.Context, full string, body io.Reader, token string, opts PutOptions) (*transfermanager.UploadObjectInput, error) {
	in := &transfermanager.UploadObjectInput{
		Bucket:            aws.String(s.cfg.Bucket),
		Key:               aws.String(full),
		Body:              body,
		ChecksumAlgorithm: tmtypes.ChecksumAlgorithmCrc32,
		// A full-object CRC32 of a multipart object can be compared with the
		// one computed here, whatever the part boundaries.
		ChecksumType:         tmtypes.ChecksumTypeFullObject,
		ServerSideEncryption: tmtypes.ServerSideEncryption(s.cfg.SSE),
		StorageClass:         tmtypes.StorageClass(s.cfg.StorageClass),
		// Create, never replace: PutObject and CompleteMultipartUpload
		// fail with 412 when the key exists, so of two writers of one key
		// exactly one wins.
		IfNoneMatch: aws.String("*"),
		// The token tells this Put's object from another writer's when a
		// retried request meets the object its own first attempt created.
		Metadata: map[string]string{putTokenKey: token},
	}
	if opts.ContentType != "" {
		in.ContentType = aws.String(opts.ContentType)
	}
	if s.cfg.SSEKMSKeyID != "" {
		in.SSEKMSKeyID = aws.String(s.cfg.SSEKMSKeyID)
	}
	if opts.LockMode != "" || opts.LegalHold {
		// Refuse before sending anything: some servers store the object
		// and only then reject the lock headers.
		if err := s.checkObjectLock(ctx); err != nil {
			return nil, err
		}
	}
	if opts.LockMode != "" {
		in.ObjectLockMode = tmtypes.ObjectLockMode(opts.LockMode)
		in.ObjectLockRetainUntilDate = aws.Time(opts.RetainUntil)
	}
	if opts.LegalHold {
		in.ObjectLockLegalHoldStatus = tmtypes.ObjectLockLegalHoldStatusOn
	}
	return in, nil
}

// upload runs the transfer manager and returns the new object's version
// and ETag. A failed multipart upload is aborted; an upload that met an
// existing key succeeded only when that key holds this Put's own object
// (its token: a retried request found what its first attempt created).
func (s *S3) upload(ctx context.Context, full string, in *transfermanager.UploadObjectInput, token string, opts PutOptions) (versionID, etag *string, err error) {
	uc := &uploadClient{S3APIClient: s.client}
	out, err := transfermanager.New(uc, s.tmOpts).UploadObject(ctx, in)
	if uc.maybeOrphans {
		s.abortOrphans(ctx, full, uc.uploadID)
	}
	if out != nil {
		versionID, etag = out.VersionID, out.ETag
	}
	if err == nil {
		return versionID, etag, nil
	}
	var mpe transfermanager.MultipartUploadError
	if errors.As(err, &mpe) {
		// The transfer manager aborts failed uploads itself; make sure,
		// since an upload left behind is invisible storage that is paid
		// for.
		s.abortUpload(ctx, full, mpe.UploadID())
	}
	if (opts.LockMode != "" || opts.LegalHold) && isLockUnsupported(err) {
		return nil, nil, fmt.Errorf("upload %s: %w: %w", s.name(full), s.errNoLock(), err)
	}
	if isStatus(err, 501) {
		return nil, nil, fmt.Errorf("upload %s: the S3 server does not support conditional writes (If-None-Match: *), which lifeboat needs so that no object is ever overwritten (use a server that supports them, e.g. AWS S3, versitygw): %w", s.name(full), err)
	}
	if !isStatus(err, 412) && !isStatus(err, 409) {
		return nil, nil, fmt.Errorf("upload %s: %w", s.name(full), err)
	}
	head, herr := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: aws.String(full)})
	if herr != nil || head.Metadata[putTokenKey] != token {
		return nil, nil, fmt.Errorf("upload %s: %w (another writer created it, or is creating it; objects are never replaced: delete it first, or use another key): %w", s.name(full), ErrExists, err)
	}
	return head.VersionId, head.ETag, nil
}

// confirm reads back the stored object's metadata (HEAD, with its
// checksum): this Put's token, the size and the CRC32 of the bytes sent.
func (s *S3) confirm(ctx context.Context, key, full string, body *putReader, token string, versionID, etag *string) (ObjectInfo, error) {
	in := &s3.HeadObjectInput{
		Bucket:       aws.String(s.cfg.Bucket),
		Key:          aws.String(full),
		VersionId:    versionID,
		ChecksumMode: types.ChecksumModeEnabled,
	}
	if versionID == nil {
		// Without versions, make sure it is this upload that is checked.
		in.IfMatch = etag
	}
	sha := hex.EncodeToString(body.sha.Sum(nil))
	head, err := s.client.HeadObject(ctx, in)
	if err != nil {
		// A 412 here means the object was deleted and created anew since:
		// this Put's object is gone, which is no success.
		return ObjectInfo{}, fmt.Errorf("confirm upload %s: %w", s.name(full), err)
	}
	if got := head.Metadata[putTokenKey]; got != token {
		return ObjectInfo{}, fmt.Errorf("confirm upload %s: the stored object is another writer's (put token %q, sent %q): %w", s.name(full), got, token, ErrExists)
	}
	s.lg.Debug("upload confirmed", "object", s.name(full))
	if got := aws.ToInt64(head.ContentLength); got != body.n {
		return ObjectInfo{}, fmt.Errorf("confirm upload %s: stored size %d, sent %d bytes", s.name(full), got, body.n)
	}
	if got := aws.ToString(head.ChecksumCRC32); got != "" && !strings.Contains(got, "-") &&
		head.ChecksumType != types.ChecksumTypeComposite {
		if want := body.crc32(); got != want {
			return ObjectInfo{}, fmt.Errorf("confirm upload %s: stored crc32 %s, sent %s", s.name(full), got, want)
		}
	}
	info := s.headInfo(key, head)
	info.SHA256 = sha
	return info, nil
}

// putTokenKey is the user metadata key (x-amz-meta-lifeboat-put) holding a
// random token per Put.
const putTokenKey = "lifeboat-put"

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// checkObjectLock fails with a clear error when the bucket has no Object
// Lock configuration. When the configuration cannot be read (a permission
// the credentials may lack) it lets the server decide.
func (s *S3) checkObjectLock(ctx context.Context) error {
	if s.lockOK.Load() {
		return nil
	}
	out, err := s.client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: aws.String(s.cfg.Bucket)})
	if err != nil {
		if isLockUnsupported(err) || isStatus(err, 404) {
			return fmt.Errorf("%w: %w", s.errNoLock(), err)
		}
		s.lg.Debug("cannot read the bucket's Object Lock configuration", "bucket", s.cfg.Bucket, "err", err)
		return nil
	}
	if c := out.ObjectLockConfiguration; c == nil || c.ObjectLockEnabled != types.ObjectLockEnabledEnabled {
		return s.errNoLock()
	}
	s.lockOK.Store(true)
	return nil
}

func (s *S3) errNoLock() error {
	return fmt.Errorf("object lock requested but bucket %q has no Object Lock configuration (use a bucket created with Object Lock, or drop the lock options)", s.cfg.Bucket)
}

// uploadClient is the S3 client of one Put's transfer manager. It notes
// when CreateMultipartUpload took more than one attempt or failed: an
// attempt whose response was lost may have created an upload whose id never
// arrived, which nobody would ever complete or abort.
type uploadClient struct {
	transfermanager.S3APIClient
	uploadID     string
	maybeOrphans bool
}

func (c *uploadClient) CreateMultipartUpload(ctx context.Context, in *s3.CreateMultipartUploadInput, opts ...func(*s3.Options)) (*s3.CreateMultipartUploadOutput, error) {
	out, err := c.S3APIClient.CreateMultipartUpload(ctx, in, opts...)
	if err != nil {
		c.maybeOrphans = true
		return out, err
	}
	c.uploadID = aws.ToString(out.UploadId)
	if ar, ok := retry.GetAttemptResults(out.ResultMetadata); !ok || len(ar.Results) > 1 {
		c.maybeOrphans = true
	}
	return out, nil
}

// abortOrphans aborts the multipart uploads of fullKey other than keep. It
// runs only after a CreateMultipartUpload needed retries; keys name unique
// backups, so another upload of the same key is an orphan (from a lost
// response, or an earlier crashed run).
func (s *S3) abortOrphans(ctx context.Context, fullKey, keep string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.cfg.Bucket),
		Prefix: aws.String(fullKey),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(actx)
		if err != nil {
			s.lg.Warn("list multipart uploads to abort orphans", "key", s.name(fullKey), "err", err)
			return
		}
		for _, u := range page.Uploads {
			if id := aws.ToString(u.UploadId); aws.ToString(u.Key) == fullKey && id != keep {
				s.abortUpload(actx, fullKey, id)
			}
		}
	}
}

// abortUpload aborts a multipart upload on a fresh context (the caller's may
// have ended). An upload already gone is fine.
func (s *S3) abortUpload(ctx context.Context, fullKey, uploadID string) {
	if uploadID == "" {
		return
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	_, err := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.cfg.Bucket),
		Key:      aws.String(fullKey),
		UploadId: aws.String(uploadID),
	})
	var nsu *types.NoSuchUpload
	if err != nil && !errors.As(err, &nsu) && !isStatus(err, 404) {
		// The upload's own error is what the caller gets; this one is a
		// separate problem (storage left behind) worth a warning.
		s.lg.Warn("abort multipart upload", "key", s.name(fullKey), "upload_id", uploadID, "err", err)
	}
}

func isLockUnsupported(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	msg := strings.ToLower(ae.ErrorMessage())
	return ae.ErrorCode() == "InvalidRequest" && strings.Contains(msg, "object lock") ||
		ae.ErrorCode() == "InvalidBucketObjectLockConfiguration" ||
		ae.ErrorCode() == "ObjectLockConfigurationNotFoundError"
}

// putReader hashes what passes and stops at the end of ctx.
type putReader struct {
	ctx context.Context
	r   io.Reader
	sha hash.Hash
	crc hash.Hash32
	n   int64
	err error // the first error other than io.EOF
}

func (p *putReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		p.err = err
		return 0, err
	}
	n, err := p.r.Read(b)
	p.sha.Write(b[:n])
	p.crc.Write(b[:n])
	p.n += int64(n)
	if err != nil && err != io.EOF {
		p.err = err
	}
	return n, err
}

// crc32 is the CRC32 in S3's encoding: base64 of the big-endian value.
func (p *putReader) crc32() string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], p.crc.Sum32())
	return base64.StdEncoding.EncodeToString(b[:])
}

func (s *S3) headInfo(key string, h *s3.HeadObjectOutput) ObjectInfo {
	info := ObjectInfo{
		Key:       key,
		Size:      aws.ToInt64(h.ContentLength),
		ModTime:   aws.ToTime(h.LastModified),
		LockMode:  string(h.ObjectLockMode),
		LegalHold: h.ObjectLockLegalHoldStatus == types.ObjectLockLegalHoldStatusOn,
	}
	if info.LockMode != "" {
		info.RetainUntil = aws.ToTime(h.ObjectLockRetainUntilDate)
	}
	return info
}

// Get returns the object's content; see Store. The reader is tied to ctx and
// fails (never ends early with io.EOF) when the body is cut short.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	full := s.prefix + key
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(full),
	})
	if err != nil {
		return nil, s.objectError("get", full, err)
	}
	want := int64(-1)
	if out.ContentLength != nil {
		want = *out.ContentLength
	}
	return &getReader{rc: out.Body, want: want, name: s.name(full)}, nil
}

// GetRange reads n bytes of the object from off (fewer at its end): see
// RangeReader.
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("get %s: bad range %d+%d", s.name(s.prefix+key), off, n)
	}
	full := s.prefix + key
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(full),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		return nil, s.objectError("get", full, err)
	}
	want := int64(-1)
	if out.ContentLength != nil {
		want = *out.ContentLength
	}
	return &getReader{rc: out.Body, want: want, name: s.name(full)}, nil
}

// getReader checks that the body has the advertised length.
type getReader struct {
	rc   io.ReadCloser
	want int64 // -1 when unknown
	got  int64
	name string
}

func (g *getReader) Read(b []byte) (int, error) {
	n, err := g.rc.Read(b)
	g.got += int64(n)
	switch {
	case g.want >= 0 && g.got > g.want:
		return n, fmt.Errorf("read %s: got more than the %d bytes announced", g.name, g.want)
	case err == io.EOF && g.want >= 0 && g.got < g.want:
		return n, fmt.Errorf("read %s: body ended after %d of %d bytes: %w", g.name, g.got, g.want, io.ErrUnexpectedEOF)
	case err != nil && err != io.EOF:
		return n, fmt.Errorf("read %s after %d bytes: %w", g.name, g.got, err)
	}
	return n, err
}

func (g *getReader) Close() error { return g.rc.Close() }

// Stat returns the object's size, time and Object Lock state; see Store.
func (s *S3) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	full := s.prefix + key
	head, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(full),
	})
	if err != nil {
		return ObjectInfo{}, s.objectError("stat", full, err)
	}
	return s.headInfo(key, head), nil
}

// List calls fn for each object under prefix in key order, 1000 keys a
// page; see Store. The ObjectInfo has Key, Size and ModTime.
func (s *S3) List(ctx context.Context, prefix string, fn func(ObjectInfo) error) error {
	return s.ListAfter(ctx, prefix, "", fn)
}

// Delete removes key; a missing key is not an error. In a versioned bucket
// it adds a delete marker and the data stays (see S3).
func (s *S3) Delete(ctx context.Context, key string) error {
	full := s.prefix + key
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{
		Bucket: aws.String(s.cfg.Bucket),
		Key:    aws.String(full),
	})
	if err != nil {
		if err := s.objectError("delete", full, err); errors.Is(err, ErrNotFound) {
			return nil
		}
		return fmt.Errorf("delete %s: %w", s.name(full), err)
	}
	return nil
}

// IncompleteUpload is a multipart upload that was started and neither
// completed nor aborted: storage that is paid for and invisible.
type IncompleteUpload struct {
	Key       string // relative to the store's prefix
	UploadID  string
	Initiated time.Time
}

// ListIncompleteUploads lists the multipart uploads under the store's prefix
// that were initiated before olderThan. Pass a time well in the past of any
// running Put (e.g. now minus a day) to find only orphans.
func (s *S3) ListIncompleteUploads(ctx context.Context, olderThan time.Time) ([]IncompleteUpload, error) {
	var ups []IncompleteUpload
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.cfg.Bucket),
		Prefix: aws.String(s.prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list incomplete uploads in %s: %w", s.name(s.prefix), err)
		}
		for _, u := range page.Uploads {
			at := aws.ToTime(u.Initiated)
			if !at.Before(olderThan) {
				continue
			}
			ups = append(ups, IncompleteUpload{
				Key:       strings.TrimPrefix(aws.ToString(u.Key), s.prefix),
				UploadID:  aws.ToString(u.UploadId),
				Initiated: at,
			})
		}
	}
	return ups, nil
}

// AbortIncomplete aborts one multipart upload found by
// ListIncompleteUploads. An upload already gone is not an error.
func (s *S3) AbortIncomplete(ctx context.Context, key, uploadID string) error {
	full := s.prefix + key
	_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket:   aws.String(s.cfg.Bucket),
		Key:      aws.String(full),
		UploadId: aws.String(uploadID),
	})
	var nsu *types.NoSuchUpload
	if err != nil && !errors.As(err, &nsu) && !isStatus(err, 404) {
		return fmt.Errorf("abort upload %s of %s: %w", uploadID, s.name(full), err)
	}
	return nil
}

// objectError maps a missing object to ErrNotFound.
func (s *S3) objectError(op, fullKey string, err error) error {
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	var nsb *types.NoSuchBucket
	switch {
	case errors.As(err, &nsb):
		return fmt.Errorf("%s %s: bucket %q does not exist: %w", op, s.name(fullKey), s.cfg.Bucket, err)
	case errors.As(err, &nsk), errors.As(err, &nf), isStatus(err, 404):
		return fmt.Errorf("%s %s: %w", op, s.name(fullKey), ErrNotFound)
	}
	return fmt.Errorf("%s %s: %w", op, s.name(fullKey), err)
}

func isStatus(err error, code int) bool {
	var re *awshttp.ResponseError
	return errors.As(err, &re) && re.HTTPStatusCode() == code
}

// validKey rejects keys that S3 would store under a different name than the
// directory store, so both stores behave alike.
func validKey(key string) error {
	if key == "" || strings.HasPrefix(key, "/") || strings.HasSuffix(key, "/") {
		return fmt.Errorf("invalid key %q", key)
	}
	for _, seg := range strings.Split(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("invalid key %q", key)
		}
	}
	return nil
}

// StoreURL is a parsed store URL: file:///path (Scheme "file", Dir) or
// s3://bucket/prefix (Scheme "s3", Bucket, Prefix).
type StoreURL struct {
	Scheme string
	// Dir is the absolute directory of a file:// store.
	Dir string
	// Bucket and Prefix locate an s3:// store (Prefix without leading or
	// trailing slash; empty for the bucket's root).
	Bucket, Prefix string
}

// ParseStoreURL is the one parser of store URLs (the configuration's
// store.url): file:///absolute/path or s3://bucket/prefix, never with
// credentials (S3 takes them from the AWS credential chain). Its errors
// never show a URL that holds credentials.
func ParseStoreURL(raw string) (StoreURL, error) {
	if hasUserInfo(raw) {
		return StoreURL{}, errors.New("credentials in the store URL are not allowed (S3 takes them from the AWS credential chain: AWS_ACCESS_KEY_ID, profiles, IRSA)")
	}
	if p, ok := strings.CutPrefix(raw, "file://"); ok {
		if !strings.HasPrefix(p, "/") {
			return StoreURL{}, fmt.Errorf("%q: a file URL needs an absolute path (file:///var/lib/lifeboat/backups)", raw)
		}
		return StoreURL{Scheme: "file", Dir: p}, nil
	}
	rest, ok := strings.CutPrefix(raw, "s3://")
	if !ok {
		return StoreURL{}, fmt.Errorf("%q is not a file:///path or s3://bucket/prefix URL", raw)
	}
	if rest == "" {
		return StoreURL{}, fmt.Errorf("%q: an s3 URL needs a bucket (s3://bucket/prefix)", raw)
	}
	bucket, prefix, _ := strings.Cut(rest, "/")
	if err := validBucket(bucket); err != nil {
		return StoreURL{}, fmt.Errorf("store URL %q: %w", raw, err)
	}
	if strings.ContainsAny(prefix, "?#") {
		return StoreURL{}, fmt.Errorf("store URL %q: query and fragment are not allowed", raw)
	}
	prefix = strings.TrimSuffix(prefix, "/")
	if err := validPrefix(prefix); err != nil {
		return StoreURL{}, fmt.Errorf("store URL %q: %w", raw, err)
	}
	return StoreURL{Scheme: "s3", Bucket: bucket, Prefix: prefix}, nil
}

// hasUserInfo reports whether a URL names credentials before its host
// (user:password@host).
func hasUserInfo(u string) bool {
	if _, rest, ok := strings.Cut(u, "://"); ok {
		u = rest
	}
	host, _, _ := strings.Cut(u, "/")
	return strings.Contains(host, "@")
}

// validBucket checks S3's bucket naming rules for general purpose buckets:
// 3 to 63 lower-case letters, digits, dots and hyphens, starting and ending
// with a letter or digit, not shaped like an IP address.
func validBucket(b string) error {
	if b == "" {
		return errors.New("bucket name is empty")
	}
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return fmt.Errorf("bucket name %q may hold only lower-case letters, digits, dots and hyphens", b)
		}
	}
	if !isAlnum(b[0]) || !isAlnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
	}
	if strings.Contains(b, "..") {
		return fmt.Errorf("bucket name %q has two adjacent dots", b)
	}
	if ipLike.MatchString(b) {
		return fmt.Errorf("bucket name %q looks like an IP address", b)
	}
	return nil
}

var ipLike = regexp.MustCompile(`^\d+\.\d+\.\d+\.\d+$`)

func isAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }

// validPrefix accepts "" or slash-separated segments that are neither empty
// nor "." or "..", without control characters.
func validPrefix(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 512 {
		return fmt.Errorf("prefix is %d bytes long, at most 512 allowed", len(p))
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f || r == '\\' || r == 0xfffd {
			return fmt.Errorf("prefix %q has a control character, backslash or invalid UTF-8", p)
		}
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("prefix %q has an empty, \".\" or \"..\" segment", p)
		}
	}
	return nil
}

// sdkLogger passes the AWS SDK's log lines (warnings; request and response
// logging stays off) to lifeboat's logger.
type sdkLogger struct{ lg *slog.Logger }

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	level := slog.LevelDebug
	if c == logging.Warn {
		level = slog.LevelWarn
	}
	l.lg.Log(context.Background(), level, "aws sdk: "+fmt.Sprintf(format, v...))
}
