package storage

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/listingkit/listing/app/port"
)

// newS3 serves gofakes3 (an S3 protocol implementation) with httptest and points the adapter
// at it, path-style, with static credentials.
func newS3(t *testing.T, mut ...func(*S3Config)) *S3 {
	t.Helper()
	faker := gofakes3.New(s3mem.New())
	srv := httptest.NewServer(faker.Server())
	t.Cleanup(srv.Close)
	cfg := S3Config{
		Endpoint: srv.URL, Region: "us-east-1", Bucket: "media",
		AccessKeyID: "AKIDTEST", SecretAccessKey: "SECRETTEST", UsePathStyle: true,
		MemoryBufferLimit: 64,
	}
	for _, m := range mut {
		m(&cfg)
	}
	s, err := NewS3(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.EnsureBucket(context.Background()); err != nil {
		t.Fatalf("EnsureBucket twice: %v", err)
	}
	return s
}

func countObjects(t *testing.T, s *S3) int {
	t.Helper()
	out, err := s.Client().ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(s.cfg.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	return len(out.Contents)
}

func TestS3PutTwiceIsOneObject(t *testing.T) {
	s := newS3(t)
	ctx := context.Background()
	key := "ws/1/media/2/thumb"
	if err := s.Put(ctx, key, strings.NewReader("first"), 5, "image/png"); err != nil {
		t.Fatal(err)
	}
	if err := s.Put(ctx, key, strings.NewReader("second!"), 7, "image/png"); err != nil {
		t.Fatal(err)
	}
	if n := countObjects(t, s); n != 1 {
		t.Fatalf("objects = %d, want 1", n)
	}
	rc, info, err := s.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "second!" || info.Size != 7 || info.ContentType != "image/png" {
		t.Fatalf("got %q %+v", b, info)
	}
	st, err := s.Stat(ctx, key)
	if err != nil || st.Size != 7 || st.ETag == "" {
		t.Fatalf("stat %+v %v", st, err)
	}
}

func TestS3BodiesOfEverySize(t *testing.T) {
	s := newS3(t) // MemoryBufferLimit 64: larger bodies spool to a file
	ctx := context.Background()
	big := bytes.Repeat([]byte("z"), 1000)
	cases := []struct {
		name string
		r    io.Reader
		size int64
		want error
	}{
		{"small known", bytes.NewReader(big[:10]), 10, nil},
		{"large known", bytes.NewReader(big), 1000, nil},
		{"small unknown", io.LimitReader(bytes.NewReader(big), 30), -1, nil},
		{"large unknown", struct{ io.Reader }{bytes.NewReader(big)}, -1, nil},
		{"more than declared", bytes.NewReader(big), 999, port.ErrObjectTooLarge},
		{"more than declared, small", bytes.NewReader(big[:11]), 10, port.ErrObjectTooLarge},
		{"fewer than declared", bytes.NewReader(big[:5]), 10, ErrSizeMismatch},
	}
	for _, c := range cases {
		err := s.Put(ctx, "k/"+strings.ReplaceAll(c.name, " ", "-"), c.r, c.size, "application/octet-stream")
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	if n := countObjects(t, s); n != 4 {
		t.Fatalf("objects = %d, want 4 (failed puts store nothing)", n)
	}
	st, err := s.Stat(ctx, "k/large-unknown")
	if err != nil || st.Size != 1000 {
		t.Fatalf("large unknown: %+v %v", st, err)
	}
}

func TestS3NotFoundAndDelete(t *testing.T) {
	s := newS3(t, func(c *S3Config) { c.KeyPrefix = "pfx/" })
	ctx := context.Background()
	if _, err := s.Stat(ctx, "absent"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("stat absent: %v", err)
	}
	if _, _, err := s.Get(ctx, "absent"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("get absent: %v", err)
	}
	if err := s.Put(ctx, "a/b", strings.NewReader("x"), 1, "text/plain"); err != nil {
		t.Fatal(err)
	}
	out, _ := s.Client().ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("media")})
	if len(out.Contents) != 1 || aws.ToString(out.Contents[0].Key) != "pfx/a/b" {
		t.Fatalf("key prefix not applied")
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "a/b"); err != nil {
		t.Fatalf("delete absent: %v", err)
	}
	if _, err := s.Stat(ctx, "a/b"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if err := s.Put(ctx, "../escape", strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, port.ErrObjectKeyInvalid) {
		t.Fatalf("bad key: %v", err)
	}
}

func TestS3PresignedPutWithPlainHTTPClient(t *testing.T) {
	s := newS3(t)
	ctx := context.Background()
	payload := []byte("\x89PNG\r\n\x1a\nnot really a png")
	target, err := s.UploadTarget(ctx, "ws/1/media/9/original", "image/png", int64(len(payload)), 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if target.Method != http.MethodPut || !strings.Contains(target.URL, "X-Amz-Signature=") || target.Headers["Content-Type"] != "image/png" {
		t.Fatalf("target %+v", target)
	}
	if strings.Contains(target.URL, "SECRETTEST") {
		t.Fatal("presigned URL carries the secret key")
	}
	req, _ := http.NewRequest(target.Method, target.URL, bytes.NewReader(payload))
	for k, v := range target.Headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("presigned PUT status %d", resp.StatusCode)
	}
	if _, err := s.CommitUpload(ctx, "ws/1/media/9/original"); err != nil {
		t.Fatal(err)
	}
	rc, info, err := s.Get(ctx, "ws/1/media/9/original")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, payload) || info.ContentType != "image/png" {
		t.Fatalf("got %q %+v", got, info)
	}
}

func TestS3ConfigValidate(t *testing.T) {
	bad := []S3Config{
		{},
		{Bucket: "b", Endpoint: "ftp://x"},
		{Bucket: "b", Endpoint: "http://user:pw@x"},
		{Bucket: "b", AccessKeyID: "only-id"},
	}
	for _, c := range bad {
		c.setDefaults()
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: want error", c.Endpoint)
		} else if strings.Contains(err.Error(), "pw") {
			t.Errorf("error quotes a secret: %v", err)
		}
	}
}

// TestS3UploadsGoThroughStaging: the presigned PUT writes a staging object, never the key;
// CommitUpload moves it into place once; a later PUT to the same URL and another commit leave
// the stored original as it was.
func TestS3UploadsGoThroughStaging(t *testing.T) {
	s := newS3(t, func(c *S3Config) { c.KeyPrefix = "pfx/" })
	ctx := context.Background()
	key := "ws/1/media/9/original"
	put := func(url string, headers map[string]string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("presigned PUT status %d", resp.StatusCode)
		}
	}
	read := func() string {
		t.Helper()
		rc, _, err := s.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	if _, err := s.CommitUpload(ctx, key); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("commit before any upload: %v", err)
	}
	first := []byte("first upload")
	target, err := s.UploadTarget(ctx, key, "image/png", int64(len(first)), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(target.URL, "/media/pfx/"+key+"?") {
		t.Fatalf("the presigned URL names the original's key: %s", target.URL)
	}
	put(target.URL, target.Headers, first)
	if _, err := s.Stat(ctx, key); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("the upload reached the original's key before commit: %v", err)
	}
	info, err := s.CommitUpload(ctx, key)
	if err != nil || info.Size != int64(len(first)) || info.ContentType != "image/png" {
		t.Fatalf("commit: %+v %v", info, err)
	}
	if got := read(); got != string(first) {
		t.Fatalf("original %q", got)
	}
	if n := countObjects(t, s); n != 1 {
		t.Fatalf("objects after commit = %d, want 1 (the staging object is deleted)", n)
	}

	// The URL still works until it expires, but only ever reaches the staging object.
	put(target.URL, target.Headers, []byte("second bytes"))
	if got := read(); got != string(first) {
		t.Fatalf("a PUT after commit changed the original: %q", got)
	}
	info, err = s.CommitUpload(ctx, key)
	if err != nil || info.Size != int64(len(first)) {
		t.Fatalf("second commit: %+v %v", info, err)
	}
	if got := read(); got != string(first) {
		t.Fatalf("a second commit changed the original: %q", got)
	}
	if n := countObjects(t, s); n != 1 {
		t.Fatalf("objects after the second commit = %d, want 1", n)
	}
}
