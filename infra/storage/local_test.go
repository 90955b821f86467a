package storage

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listingkit/listing/app/port"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newLocal(t *testing.T) (*Local, *clock, string) {
	t.Helper()
	dir := t.TempDir()
	clk := &clock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	l, err := NewLocal(LocalConfig{Dir: dir, PublicBaseURL: "http://api.test", UploadSigningKey: bytes.Repeat([]byte("k"), 32), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l, clk, dir
}

func TestValidateKey(t *testing.T) {
	bad := []string{"", "/abs", "../x", "a/../../x", "a/./b", "a//b", "a/", "..", ".", `a\b`, "a/\x00", "a\nb",
		"a/\u0085", strings.Repeat("a", MaxKeyLen+1), "\xff"}
	for _, k := range bad {
		if err := ValidateKey(k); !errors.Is(err, port.ErrObjectKeyInvalid) {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
	for _, k := range []string{"a", "ws/1/media/2/original", "a.b/c-d_e", "..a/b..", "ünï/cødé"} {
		if err := ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v", k, err)
		}
	}
}

func TestLocalTraversalRefused(t *testing.T) {
	l, _, dir := newLocal(t)
	ctx := context.Background()
	outside := filepath.Join(filepath.Dir(dir), "escaped")
	for _, k := range []string{"../escaped", "../../escaped", "/etc/passwd", "a/../../escaped"} {
		if err := l.Put(ctx, k, strings.NewReader("x"), 1, "text/plain"); !errors.Is(err, port.ErrObjectKeyInvalid) {
			t.Errorf("Put(%q) = %v", k, err)
		}
		if _, _, err := l.Get(ctx, k); !errors.Is(err, port.ErrObjectKeyInvalid) {
			t.Errorf("Get(%q) = %v", k, err)
		}
	}
	if _, err := os.Stat(outside); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("a file escaped the storage directory")
	}
	// a symlink planted inside the tree cannot lead outside either (os.Root)
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("secret"), 0o600)
	os.MkdirAll(filepath.Join(dir, "objects", "ws"), 0o750)
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "objects", "ws", "link")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(ctx, "ws/link/secret"); err == nil {
		t.Fatal("read through a symlink out of the root")
	}
	if err := l.Put(ctx, "ws/link/new", strings.NewReader("x"), 1, "text/plain"); err == nil {
		t.Fatal("wrote through a symlink out of the root")
	}
}

func TestLocalPutGetOverwrite(t *testing.T) {
	l, _, dir := newLocal(t)
	ctx := context.Background()
	key := "ws/1/media/2/thumb.png"
	if err := l.Put(ctx, key, strings.NewReader("one"), 3, "image/png"); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, key, strings.NewReader("second"), -1, "image/webp"); err != nil {
		t.Fatal(err)
	}
	rc, info, err := l.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "second" || info.Size != 6 || info.ContentType != "image/webp" || info.ETag == "" {
		t.Fatalf("got %q %+v", b, info)
	}
	files := 0
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files++
		}
		return nil
	})
	if files != 1 {
		t.Fatalf("object files = %d, want 1", files)
	}
	if _, err := l.Stat(ctx, "ws/1/media"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("a directory is not an object: %v", err)
	}
	if _, err := l.Stat(ctx, key+"/deeper"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("below a file: %v", err)
	}
	if err := l.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if err := l.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Get(ctx, key); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("after delete: %v", err)
	}
}

// failingReader yields some bytes and then fails, like a connection dropping mid-upload.
type failingReader struct{ n int }

func (f *failingReader) Read(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, errors.New("connection reset")
	}
	n := min(len(p), f.n)
	for i := range p[:n] {
		p[i] = 'n'
	}
	f.n -= n
	return n, nil
}

func TestLocalAtomicWrite(t *testing.T) {
	l, _, dir := newLocal(t)
	ctx := context.Background()
	key := "ws/1/original"
	if err := l.Put(ctx, key, strings.NewReader("old"), 3, "text/plain"); err != nil {
		t.Fatal(err)
	}
	// failed writes of every kind leave the old object whole and no temp file behind
	fails := []struct {
		r    io.Reader
		size int64
		want error
	}{
		{&failingReader{n: 5000}, -1, port.ErrStorageUnavailable},
		{strings.NewReader("too long"), 3, port.ErrObjectTooLarge},
		{strings.NewReader("ab"), 3, ErrSizeMismatch},
	}
	for _, f := range fails {
		if err := l.Put(ctx, key, f.r, f.size, "text/plain"); !errors.Is(err, f.want) {
			t.Errorf("err = %v, want %v", err, f.want)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.Put(cctx, key, strings.NewReader("new"), 3, "text/plain"); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled: %v", err)
	}
	rc, _, err := l.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "old" {
		t.Fatalf("object after failed writes = %q", b)
	}
	entries, _ := os.ReadDir(filepath.Join(dir, "tmp"))
	if len(entries) != 0 {
		t.Fatalf("temp files left: %d", len(entries))
	}

	// concurrent writers and readers: every read sees one whole version
	var wg sync.WaitGroup
	a, z := strings.Repeat("a", 64<<10), strings.Repeat("z", 64<<10)
	for i := 0; i < 8; i++ {
		wg.Add(2)
		go func(i int) {
			defer wg.Done()
			body := a
			if i%2 == 1 {
				body = z
			}
			if err := l.Put(ctx, "ws/race", strings.NewReader(body), int64(len(body)), "text/plain"); err != nil {
				t.Error(err)
			}
		}(i)
		go func() {
			defer wg.Done()
			rc, _, err := l.Get(ctx, "ws/race")
			if errors.Is(err, port.ErrObjectNotFound) {
				return
			}
			if err != nil {
				t.Error(err)
				return
			}
			got, _ := io.ReadAll(rc)
			rc.Close()
			if s := string(got); s != a && s != z {
				t.Errorf("torn read: %d bytes", len(got))
			}
		}()
	}
	wg.Wait()
}

func TestUploadTokenExpiryAndTamper(t *testing.T) {
	l, clk, _ := newLocal(t)
	ctx := context.Background()
	target, err := l.UploadTarget(ctx, "ws/1/media/5/original", "image/jpeg", 100, 15*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if target.Method != "PUT" || !strings.HasPrefix(target.URL, "http://api.test/v1/uploads/") || target.Headers["Content-Type"] != "image/jpeg" {
		t.Fatalf("target %+v", target)
	}
	token := strings.TrimPrefix(target.URL, "http://api.test/v1/uploads/")
	g, err := l.VerifyUploadToken(token)
	if err != nil || g.Key != "ws/1/media/5/original" || g.MaxSize != 100 || g.ContentType != "image/jpeg" {
		t.Fatalf("grant %+v %v", g, err)
	}

	payload, sig, _ := strings.Cut(token, ".")
	forge := func(mut func(*grantWire)) string {
		var w grantWire
		raw, _ := b64.DecodeString(payload)
		json.Unmarshal(raw, &w)
		mut(&w)
		raw, _ = json.Marshal(w)
		return b64.EncodeToString(raw) + "." + sig
	}
	tampered := []string{
		"", "nodot", payload + ".", "." + sig, payload + "." + sig[:len(sig)-2] + "AA",
		forge(func(w *grantWire) { w.MaxSize = 1 << 40 }),
		forge(func(w *grantWire) { w.Key = "ws/2/media/5/original" }),
		forge(func(w *grantWire) { w.Exp += 3600 }),
	}
	for _, tok := range tampered {
		if _, err := l.VerifyUploadToken(tok); !errors.Is(err, ErrUploadTokenInvalid) {
			t.Errorf("tampered %q: %v", tok, err)
		}
	}
	other, _ := NewLocal(LocalConfig{Dir: t.TempDir(), UploadSigningKey: bytes.Repeat([]byte("o"), 32), Now: clk.Now})
	defer other.Close()
	if _, err := other.VerifyUploadToken(token); !errors.Is(err, ErrUploadTokenInvalid) {
		t.Errorf("another key accepted the token: %v", err)
	}

	clk.Add(15*time.Minute - time.Second)
	if _, err := l.VerifyUploadToken(token); err != nil {
		t.Fatalf("before expiry: %v", err)
	}
	clk.Add(time.Second)
	if _, err := l.VerifyUploadToken(token); !errors.Is(err, ErrUploadTokenExpired) {
		t.Fatalf("at expiry: %v", err)
	}
	long, _ := l.UploadTarget(ctx, "k", "image/png", 1, 48*time.Hour)
	if long.ExpiresAt.After(clk.Now().Add(time.Hour)) {
		t.Fatalf("ttl not capped: %s", long.ExpiresAt)
	}
}

func TestUploadHandler(t *testing.T) {
	l, clk, _ := newLocal(t)
	ctx := context.Background()
	mux := http.NewServeMux()
	mux.Handle("PUT /v1/uploads/{token}", l.UploadHandler(UploadHandlerConfig{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	put := func(url, ct string, body io.Reader) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPut, url, body)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var problem map[string]any
		json.NewDecoder(resp.Body).Decode(&problem)
		return resp, problem
	}
	target, _ := l.UploadTarget(ctx, "ws/1/media/7/original", "image/png", 10, time.Minute)
	url := srv.URL + strings.TrimPrefix(target.URL, "http://api.test")

	resp, p := put(url, "image/jpeg", strings.NewReader("0123456789"))
	if resp.StatusCode != 415 || p["code"] != "UPLOAD_CONTENT_TYPE_MISMATCH" {
		t.Fatalf("wrong type: %d %v", resp.StatusCode, p)
	}
	resp, p = put(url, "image/png", strings.NewReader("0123456789X"))
	if resp.StatusCode != 413 || p["code"] != "OBJECT_TOO_LARGE" {
		t.Fatalf("too large (Content-Length): %d %v", resp.StatusCode, p)
	}
	resp, p = put(url, "image/png", struct{ io.Reader }{strings.NewReader(strings.Repeat("X", 5000))})
	if resp.StatusCode != 413 || p["code"] != "OBJECT_TOO_LARGE" {
		t.Fatalf("too large (chunked): %d %v", resp.StatusCode, p)
	}
	if _, err := l.Stat(ctx, "ws/1/media/7/original"); !errors.Is(err, port.ErrObjectNotFound) {
		t.Fatalf("refused uploads stored something: %v", err)
	}
	resp, _ = put(url, "image/png", strings.NewReader("0123456789"))
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == "" {
		t.Fatalf("upload: %d", resp.StatusCode)
	}
	info, err := l.Stat(ctx, "ws/1/media/7/original")
	if err != nil || info.Size != 10 || info.ContentType != "image/png" {
		t.Fatalf("stored %+v %v", info, err)
	}
	resp, p = put(srv.URL+"/v1/uploads/forged.token", "image/png", strings.NewReader("x"))
	if resp.StatusCode != 403 || p["code"] != "UPLOAD_TOKEN_INVALID" {
		t.Fatalf("forged: %d %v", resp.StatusCode, p)
	}
	clk.Add(2 * time.Minute)
	resp, p = put(url, "image/png", strings.NewReader("0123456789"))
	if resp.StatusCode != 403 || p["code"] != "UPLOAD_TOKEN_EXPIRED" {
		t.Fatalf("expired: %d %v", resp.StatusCode, p)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("content type %q", ct)
	}
}

var b64 = base64RawURL{}

type base64RawURL struct{}

func (base64RawURL) DecodeString(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(s)
}
func (base64RawURL) EncodeToString(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestUploadHandlerSingleUse: a grant is spent by its first complete upload. A refused upload
// does not spend it; once one succeeded, every other PUT (after it, or racing it) gets 409
// UPLOAD_ALREADY_COMPLETED and the stored bytes stay the first upload's.
func TestUploadHandlerSingleUse(t *testing.T) {
	l, _, _ := newLocal(t)
	ctx := context.Background()
	mux := http.NewServeMux()
	mux.Handle("PUT /v1/uploads/{token}", l.UploadHandler(UploadHandlerConfig{}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	put := func(url, body string) (int, string) {
		req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
		req.Header.Set("Content-Type", "image/png")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, ""
		}
		defer resp.Body.Close()
		var p struct{ Code string }
		json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Code
	}
	stored := func(key string) string {
		rc, _, err := l.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, _ := io.ReadAll(rc)
		return string(b)
	}
	key := "ws/1/media/8/original"
	target, _ := l.UploadTarget(ctx, key, "image/png", 5, time.Minute)
	url := srv.URL + strings.TrimPrefix(target.URL, "http://api.test")

	if status, code := put(url, "toolong"); status != 413 {
		t.Fatalf("too large: %d %s", status, code)
	}
	if status, code := put(url, "first"); status != 200 {
		t.Fatalf("first upload after a refused one: %d %s", status, code)
	}
	info, _ := l.Stat(ctx, key)
	for _, body := range []string{"other", "x"} {
		if status, code := put(url, body); status != 409 || code != "UPLOAD_ALREADY_COMPLETED" {
			t.Fatalf("second upload: %d %s", status, code)
		}
	}
	if got, after := stored(key), mustStat(t, l, key); got != "first" || after.ETag != info.ETag || after.ContentType != "image/png" {
		t.Fatalf("stored %q %+v after refused uploads", got, after)
	}

	// Racing uploads of one grant: exactly one is stored, the others are refused.
	key = "ws/1/media/9/original"
	target, _ = l.UploadTarget(ctx, key, "image/png", 5, time.Minute)
	url = srv.URL + strings.TrimPrefix(target.URL, "http://api.test")
	bodies := []string{"aaaaa", "bbbbb", "ccccc", "ddddd", "eeeee", "fffff"}
	statuses := make([]int, len(bodies))
	var wg sync.WaitGroup
	for i, b := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i], _ = put(url, b)
		}()
	}
	wg.Wait()
	winner := ""
	for i, s := range statuses {
		switch s {
		case 200:
			if winner != "" {
				t.Fatalf("two uploads of one grant succeeded: %v", statuses)
			}
			winner = bodies[i]
		case 409:
		default:
			t.Fatalf("racing upload: %d", s)
		}
	}
	if winner == "" || stored(key) != winner {
		t.Fatalf("winner %q, stored %q", winner, stored(key))
	}
}

func mustStat(t *testing.T, l *Local, key string) port.ObjectInfo {
	t.Helper()
	info, err := l.Stat(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return info
}
