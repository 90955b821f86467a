package storage

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/listingkit/listing/app/port"
)

// S3Config configures NewS3.
type S3Config struct {
	// Endpoint of an S3-compatible service, S3_ENDPOINT, e.g. "http://127.0.0.1:9000".
	// Default "": AWS's regional endpoint.
	Endpoint string
	// Region, S3_REGION. Default "us-east-1".
	Region string
	// Bucket, S3_BUCKET. Required.
	Bucket string
	// KeyPrefix is prepended to every key, S3_KEY_PREFIX (e.g. "listing/"). Default "".
	KeyPrefix string
	// AccessKeyID and SecretAccessKey, S3_ACCESS_KEY_ID / S3_SECRET_ACCESS_KEY (and
	// SessionToken). Default "": the AWS default credential chain (env, profile, IAM role).
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// UsePathStyle addresses buckets as {endpoint}/{bucket}/{key}, S3_USE_PATH_STYLE. Set it
	// for MinIO and most S3-compatible servers. Default false (virtual-hosted style).
	UsePathStyle bool
	// MaxPresignTTL caps UploadTarget's ttl (SigV4 allows 7 days). Default 1h.
	MaxPresignTTL time.Duration
	// MemoryBufferLimit: Put buffers bodies up to this size in memory and larger ones in a
	// temporary file, so every PUT has a known length and a replayable body. Default 8 MiB.
	MemoryBufferLimit int64
	// TempDir for spooled bodies. Default os.TempDir().
	TempDir string
	// HTTPClient for the SDK. Default: the SDK's.
	HTTPClient *http.Client
}

func (c *S3Config) setDefaults() {
	if c.Region == "" {
		c.Region = "us-east-1"
	}
	if c.MaxPresignTTL == 0 {
		c.MaxPresignTTL = time.Hour
	}
	if c.MemoryBufferLimit == 0 {
		c.MemoryBufferLimit = 8 << 20
	}
}

// Validate reports the first invalid field without changing c (never quoting a secret).
func (c S3Config) Validate() error {
	if c.Bucket == "" {
		return errors.New("storage: Bucket (S3_BUCKET) is required")
	}
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return errors.New("storage: Endpoint (S3_ENDPOINT) must be an absolute http(s) URL without user info")
		}
	}
	if (c.AccessKeyID == "") != (c.SecretAccessKey == "") {
		return errors.New("storage: S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY go together")
	}
	if c.MaxPresignTTL < time.Second || c.MaxPresignTTL > 7*24*time.Hour {
		return errors.New("storage: MaxPresignTTL must be within 1s..7d")
	}
	if c.MemoryBufferLimit < 0 {
		return errors.New("storage: MemoryBufferLimit must not be negative")
	}
	return nil
}

// S3 stores objects in one bucket of an S3-compatible service. Safe for concurrent use.
type S3 struct {
	cfg     S3Config
	client  *s3.Client
	presign *s3.PresignClient
}

var _ port.ObjectStorage = (*S3)(nil)

// NewS3 builds the client. It does not contact the service (see EnsureBucket).
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storage.NewS3: %w", err)
	}
	opts := []func(*config.LoadOptions) error{config.WithRegion(cfg.Region)}
	if cfg.AccessKeyID != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)))
	}
	if cfg.HTTPClient != nil {
		opts = append(opts, config.WithHTTPClient(cfg.HTTPClient))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("storage.NewS3: load AWS config: %w", err)
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.UsePathStyle
		// Checksums only where S3 requires them: many S3-compatible servers reject the
		// newer default trailers.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	return &S3{cfg: cfg, client: client, presign: s3.NewPresignClient(client)}, nil
}

// Client returns the underlying SDK client (for operators' tools and tests).
func (s *S3) Client() *s3.Client { return s.client }

// EnsureBucket creates the bucket when it does not exist (development and tests).
func (s *S3) EnsureBucket(ctx context.Context) error {
	_, err := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	if err == nil {
		return nil
	}
	if !isNotFound(err) {
		return fmt.Errorf("storage.S3.EnsureBucket: %w", port.ErrStorageUnavailable.WithCause(err))
	}
	_, err = s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(s.cfg.Bucket)})
	var owned *types.BucketAlreadyOwnedByYou
	if err != nil && !errors.As(err, &owned) {
		return fmt.Errorf("storage.S3.EnsureBucket: %w", port.ErrStorageUnavailable.WithCause(err))
	}
	return nil
}

func (s *S3) key(key string) *string { return aws.String(s.cfg.KeyPrefix + key) }

// Put implements port.ObjectStorage. The body is buffered (memory, or a temporary file past
// MemoryBufferLimit) so that the size is checked before anything is sent and the SDK can sign
// and retry the PUT.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	const op = "storage.S3.Put"
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	body, n, cleanup, err := s.buffer(ctx, r, size)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer cleanup()
	in := &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.Bucket),
		Key:           s.key(key),
		Body:          body,
		ContentLength: aws.Int64(n),
	}
	if contentType != "" {
		in.ContentType = aws.String(contentType)
	}
	if _, err := s.client.PutObject(ctx, in); err != nil {
		return fmt.Errorf("%s: %w", op, mapS3Error(err))
	}
	return nil
}

// buffer reads r (checking size) into memory or a temporary file and returns a seekable body.
func (s *S3) buffer(ctx context.Context, r io.Reader, size int64) (io.ReadSeeker, int64, func(), error) {
	noop := func() {}
	if size >= 0 && size <= s.cfg.MemoryBufferLimit {
		var buf bytes.Buffer
		buf.Grow(int(size))
		n, err := copyLimited(ctx, &buf, r, size)
		if err != nil {
			return nil, 0, noop, err
		}
		return bytes.NewReader(buf.Bytes()), n, noop, nil
	}
	if size < 0 {
		// Unknown size: memory up to the limit, then spill to a file.
		var buf bytes.Buffer
		n, err := copyLimited(ctx, &buf, io.LimitReader(r, s.cfg.MemoryBufferLimit+1), -1)
		if err != nil {
			return nil, 0, noop, err
		}
		if n <= s.cfg.MemoryBufferLimit {
			return bytes.NewReader(buf.Bytes()), n, noop, nil
		}
		r = io.MultiReader(bytes.NewReader(buf.Bytes()), r)
	}
	f, err := os.CreateTemp(s.cfg.TempDir, "listing-s3-*")
	if err != nil {
		return nil, 0, noop, port.ErrStorageUnavailable.WithCause(err)
	}
	cleanup := func() { f.Close(); os.Remove(f.Name()) }
	n, err := copyLimited(ctx, f, r, size)
	if err != nil {
		cleanup()
		return nil, 0, noop, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		cleanup()
		return nil, 0, noop, port.ErrStorageUnavailable.WithCause(err)
	}
	return f, n, cleanup, nil
}

// Get implements port.ObjectStorage.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, port.ObjectInfo, error) {
	const op = "storage.S3.Get"
	if err := ValidateKey(key); err != nil {
		return nil, port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		return nil, port.ObjectInfo{}, fmt.Errorf("%s: %w", op, mapS3Error(err))
	}
	return out.Body, port.ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ContentType: aws.ToString(out.ContentType),
		ETag: aws.ToString(out.ETag), ModTime: aws.ToTime(out.LastModified),
	}, nil
}

// Stat implements port.ObjectStorage.
func (s *S3) Stat(ctx context.Context, key string) (port.ObjectInfo, error) {
	const op = "storage.S3.Stat"
	if err := ValidateKey(key); err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, mapS3Error(err))
	}
	return port.ObjectInfo{
		Key: key, Size: aws.ToInt64(out.ContentLength), ContentType: aws.ToString(out.ContentType),
		ETag: aws.ToString(out.ETag), ModTime: aws.ToTime(out.LastModified),
	}, nil
}

// Delete implements port.ObjectStorage.
func (s *S3) Delete(ctx context.Context, key string) error {
	const op = "storage.S3.Delete"
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("%s: %w", op, mapS3Error(err))
	}
	return nil
}

// stagingPrefix holds the objects clients upload through presigned URLs until CommitUpload
// moves them to their key. A bucket lifecycle rule on it may expire abandoned uploads.
const stagingPrefix = "staging/"

func stagingKey(key string) string { return stagingPrefix + key }

// UploadTarget implements port.ObjectStorage: a presigned PUT of the staging object of key
// (never key itself: S3 cannot make a presigned URL single use, so the URL must not reach
// the stored object). Content-Type and Content-Length (= size) are signed, so S3 accepts
// exactly size bytes of that type.
func (s *S3) UploadTarget(ctx context.Context, key, contentType string, size int64, ttl time.Duration) (port.UploadTarget, error) {
	const op = "storage.S3.UploadTarget"
	if err := ValidateKey(key); err != nil {
		return port.UploadTarget{}, fmt.Errorf("%s: %w", op, err)
	}
	if size < 0 || contentType == "" {
		return port.UploadTarget{}, fmt.Errorf("%s: %w", op, port.ErrObjectKeyInvalid.WithMessage("an upload needs a size and a content type"))
	}
	if ttl <= 0 || ttl > s.cfg.MaxPresignTTL {
		ttl = s.cfg.MaxPresignTTL
	}
	req, err := s.presign.PresignPutObject(ctx, &s3.PutObjectInput{
		Bucket:        aws.String(s.cfg.Bucket),
		Key:           s.key(stagingKey(key)),
		ContentType:   aws.String(contentType),
		ContentLength: aws.Int64(size),
	}, s3.WithPresignExpires(ttl))
	if err != nil {
		return port.UploadTarget{}, fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	headers := map[string]string{}
	for name, vals := range req.SignedHeader {
		if strings.EqualFold(name, "Host") || len(vals) == 0 {
			continue
		}
		headers[http.CanonicalHeaderKey(name)] = strings.Join(vals, ",")
	}
	headers["Content-Type"] = contentType
	return port.UploadTarget{Method: req.Method, URL: req.URL, Headers: headers, ExpiresAt: time.Now().Add(ttl)}, nil
}

// CommitUpload implements port.ObjectStorage: when no object exists under key, it copies the
// staging object there (server side) and deletes the staging object. When one exists, it is
// returned unchanged and the staging object is deleted: the original is written once. A
// staging object left behind by a failed delete is harmless for the same reason.
func (s *S3) CommitUpload(ctx context.Context, key string) (port.ObjectInfo, error) {
	const op = "storage.S3.CommitUpload"
	if err := ValidateKey(key); err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	staging := stagingKey(key)
	info, err := s.Stat(ctx, key)
	if errors.Is(err, port.ErrObjectNotFound) {
		source := s.cfg.Bucket + "/" + escapeKey(s.cfg.KeyPrefix+staging)
		_, err = s.client.CopyObject(ctx, &s3.CopyObjectInput{Bucket: aws.String(s.cfg.Bucket), Key: s.key(key), CopySource: aws.String(source)})
		if err != nil {
			return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, mapS3Error(err))
		}
		info, err = s.Stat(ctx, key)
	}
	if err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	_ = s.Delete(ctx, staging)
	return info, nil
}

// escapeKey URL-encodes each segment of an object key, as CopySource requires.
func escapeKey(key string) string {
	segs := strings.Split(key, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.Join(segs, "/")
}

// isNotFound reports a missing object (or, for HeadBucket, a missing bucket). A missing
// bucket on an object call is a configuration error, not a missing object.
func isNotFound(err error) bool {
	var nb *types.NoSuchBucket
	var ae smithy.APIError
	if errors.As(err, &nb) || (errors.As(err, &ae) && ae.ErrorCode() == "NoSuchBucket") {
		return false
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) {
		return true
	}
	var re *awshttp.ResponseError
	if errors.As(err, &re) && re.HTTPStatusCode() == http.StatusNotFound {
		return true
	}
	return errors.As(err, &ae) && (ae.ErrorCode() == "NoSuchKey" || ae.ErrorCode() == "NotFound")
}

func mapS3Error(err error) error {
	if isNotFound(err) {
		return port.ErrObjectNotFound
	}
	return port.ErrStorageUnavailable.WithCause(err)
}
