package storage

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/listingkit/listing/app/port"
)

// LocalConfig configures NewLocal.
type LocalConfig struct {
	// Dir is the storage directory, STORAGE_DIR. Created when missing. Default "./data/storage".
	Dir string
	// PublicBaseURL is our service's base URL as clients reach it, PUBLIC_BASE_URL; upload
	// URLs are "{PublicBaseURL}{UploadPath}{token}". Default "http://127.0.0.1:8080".
	PublicBaseURL string
	// UploadPath is where the HTTP layer mounts UploadHandler. Default "/v1/uploads/".
	UploadPath string
	// UploadSigningKey signs upload tokens, UPLOAD_SIGNING_KEY (base64, at least 32 bytes;
	// see DecodeSigningKey). Every process that serves uploads must share it. Default: a random
	// key per process (development only: upload URLs die with the process).
	UploadSigningKey []byte
	// MaxUploadTTL caps the ttl of UploadTarget. Default 1h.
	MaxUploadTTL time.Duration
	// Logger gets upload outcomes (never keys or tokens). Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

func (c *LocalConfig) setDefaults() error {
	if c.Dir == "" {
		c.Dir = "./data/storage"
	}
	if c.PublicBaseURL == "" {
		c.PublicBaseURL = "http://127.0.0.1:8080"
	}
	if c.UploadPath == "" {
		c.UploadPath = "/v1/uploads/"
	}
	if len(c.UploadSigningKey) == 0 {
		k := make([]byte, 32)
		if _, err := rand.Read(k); err != nil {
			return err
		}
		c.UploadSigningKey = k
	}
	if c.MaxUploadTTL == 0 {
		c.MaxUploadTTL = time.Hour
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// Validate reports the first invalid field without changing c (never quoting the key).
func (c LocalConfig) Validate() error {
	if c.Dir == "" {
		return errors.New("storage: Dir (STORAGE_DIR) is required")
	}
	u, err := url.Parse(c.PublicBaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("storage: PublicBaseURL (PUBLIC_BASE_URL) must be an absolute http(s) URL")
	}
	if !strings.HasPrefix(c.UploadPath, "/") || !strings.HasSuffix(c.UploadPath, "/") {
		return errors.New("storage: UploadPath must start and end with /")
	}
	if len(c.UploadSigningKey) < 32 {
		return errors.New("storage: UploadSigningKey (UPLOAD_SIGNING_KEY) must be at least 32 bytes")
	}
	if c.MaxUploadTTL < time.Second {
		return errors.New("storage: MaxUploadTTL must be at least 1s")
	}
	return nil
}

// DecodeSigningKey decodes UPLOAD_SIGNING_KEY (standard or URL base64, padded or not).
func DecodeSigningKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(strings.TrimSpace(s)); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("storage: UPLOAD_SIGNING_KEY is not base64")
}

// Local stores objects under a directory: objects/<key> holds the bytes, meta/<key>.json the
// content type; tmp/ holds writes in progress. Safe for concurrent use, also by several
// processes sharing the directory.
type Local struct {
	cfg  LocalConfig
	root *os.Root
}

var _ port.ObjectStorage = (*Local)(nil)

const (
	objectsDir = "objects"
	metaDir    = "meta"
	tmpDir     = "tmp"
)

// NewLocal opens (creating when needed) the directory. Close releases it.
func NewLocal(cfg LocalConfig) (*Local, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, fmt.Errorf("storage.NewLocal: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("storage.NewLocal: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o750); err != nil {
		return nil, fmt.Errorf("storage.NewLocal: %w", err)
	}
	root, err := os.OpenRoot(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("storage.NewLocal: %w", err)
	}
	for _, d := range []string{objectsDir, metaDir, tmpDir} {
		if err := root.MkdirAll(d, 0o750); err != nil {
			root.Close()
			return nil, fmt.Errorf("storage.NewLocal: %w", err)
		}
	}
	l := &Local{cfg: cfg, root: root}
	l.sweepTemp(24 * time.Hour)
	return l, nil
}

// Close releases the directory handle.
func (l *Local) Close() error { return l.root.Close() }

// sweepTemp removes abandoned temporary files (a crash mid-write) older than age.
func (l *Local) sweepTemp(age time.Duration) {
	entries, err := fs.ReadDir(l.root.FS(), tmpDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if info, err := e.Info(); err == nil && l.cfg.Now().Sub(info.ModTime()) > age {
			_ = l.root.Remove(path.Join(tmpDir, e.Name()))
		}
	}
}

type localMeta struct {
	ContentType string `json:"content_type"`
	SHA256      string `json:"sha256"`
}

// Put implements port.ObjectStorage: temp file, fsync, rename.
func (l *Local) Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error {
	return l.put(ctx, "storage.Local.Put", key, r, size, contentType, true)
}

// create is Put that never replaces: when an object exists under key it stores nothing and
// fails with ErrUploadAlreadyCompleted. Of concurrent creates of one key exactly one
// succeeds (a hard link, which fails when its name exists). Its metadata is written just
// after the object appears, so a reader racing the upload itself may see the default
// content type.
func (l *Local) create(ctx context.Context, key string, r io.Reader, contentType string) error {
	return l.put(ctx, "storage.Local.create", key, r, -1, contentType, false)
}

func (l *Local) put(ctx context.Context, op, key string, r io.Reader, size int64, contentType string, replace bool) error {
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	tmpData, err := l.createTemp()
	if err != nil {
		return fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	committed := false
	defer func() {
		if !committed {
			_ = l.root.Remove(tmpData.name)
		}
	}()
	h := sha256.New()
	if _, err := copyLimited(ctx, io.MultiWriter(tmpData.f, h), r, size); err != nil {
		tmpData.f.Close()
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := tmpData.f.Sync(); err != nil {
		tmpData.f.Close()
		return fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	if err := tmpData.f.Close(); err != nil {
		return fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	meta, _ := json.Marshal(localMeta{ContentType: contentType, SHA256: hex.EncodeToString(h.Sum(nil))})
	if err := l.root.MkdirAll(path.Dir(objectPath(key)), 0o750); err != nil {
		return fmt.Errorf("%s: %w", op, mkdirError(err))
	}
	if !replace {
		if err := l.root.Link(tmpData.name, objectPath(key)); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", op, ErrUploadAlreadyCompleted)
			}
			return fmt.Errorf("%s: %w", op, mkdirError(err))
		}
		if err := l.writeAtomic(metaPath(key), meta); err != nil {
			_ = l.root.Remove(objectPath(key)) // a failed upload does not spend the grant
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil // the deferred cleanup removes the temporary name
	}
	if err := l.writeAtomic(metaPath(key), meta); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := l.root.Rename(tmpData.name, objectPath(key)); err != nil {
		return fmt.Errorf("%s: %w", op, mkdirError(err))
	}
	committed = true
	return nil
}

// mkdirError maps a clash between a key and another key's prefix ("a" vs "a/b").
func mkdirError(err error) error {
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrInvalid) || strings.Contains(err.Error(), "not a directory") || strings.Contains(err.Error(), "is a directory") {
		return port.ErrObjectKeyInvalid.WithMessage("the key clashes with an existing object").WithCause(err)
	}
	return port.ErrStorageUnavailable.WithCause(err)
}

type tempFile struct {
	f    *os.File
	name string
}

func (l *Local) createTemp() (tempFile, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return tempFile{}, err
	}
	name := path.Join(tmpDir, hex.EncodeToString(b))
	f, err := l.root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o640)
	if err != nil {
		return tempFile{}, err
	}
	return tempFile{f: f, name: name}, nil
}

func (l *Local) writeAtomic(name string, data []byte) error {
	t, err := l.createTemp()
	if err != nil {
		return port.ErrStorageUnavailable.WithCause(err)
	}
	_, werr := t.f.Write(data)
	if werr == nil {
		werr = t.f.Sync()
	}
	if cerr := t.f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = l.root.Remove(t.name)
		return port.ErrStorageUnavailable.WithCause(werr)
	}
	if err := l.root.MkdirAll(path.Dir(name), 0o750); err != nil {
		_ = l.root.Remove(t.name)
		return mkdirError(err)
	}
	if err := l.root.Rename(t.name, name); err != nil {
		_ = l.root.Remove(t.name)
		return mkdirError(err)
	}
	return nil
}

func objectPath(key string) string { return objectsDir + "/" + key }
func metaPath(key string) string   { return metaDir + "/" + key + ".json" }

// Get implements port.ObjectStorage.
func (l *Local) Get(ctx context.Context, key string) (io.ReadCloser, port.ObjectInfo, error) {
	const op = "storage.Local.Get"
	if err := ValidateKey(key); err != nil {
		return nil, port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	f, err := l.root.Open(objectPath(key))
	if err != nil {
		return nil, port.ObjectInfo{}, fmt.Errorf("%s: %w", op, notFound(err))
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = fs.ErrNotExist
		}
		return nil, port.ObjectInfo{}, fmt.Errorf("%s: %w", op, notFound(err))
	}
	return f, l.info(key, st), nil
}

// Stat implements port.ObjectStorage.
func (l *Local) Stat(ctx context.Context, key string) (port.ObjectInfo, error) {
	const op = "storage.Local.Stat"
	if err := ValidateKey(key); err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, err)
	}
	st, err := l.root.Stat(objectPath(key))
	if err == nil && !st.Mode().IsRegular() {
		err = fs.ErrNotExist
	}
	if err != nil {
		return port.ObjectInfo{}, fmt.Errorf("%s: %w", op, notFound(err))
	}
	return l.info(key, st), nil
}

func (l *Local) info(key string, st fs.FileInfo) port.ObjectInfo {
	info := port.ObjectInfo{
		Key:         key,
		Size:        st.Size(),
		ContentType: "application/octet-stream",
		ModTime:     st.ModTime().UTC(),
	}
	if raw, err := l.root.ReadFile(metaPath(key)); err == nil {
		var m localMeta
		if json.Unmarshal(raw, &m) == nil {
			if m.ContentType != "" {
				info.ContentType = m.ContentType
			}
			info.ETag = `"` + m.SHA256 + `"`
		}
	}
	return info
}

// Delete implements port.ObjectStorage.
func (l *Local) Delete(ctx context.Context, key string) error {
	const op = "storage.Local.Delete"
	if err := ValidateKey(key); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if err := l.root.Remove(objectPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	if err := l.root.Remove(metaPath(key)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", op, port.ErrStorageUnavailable.WithCause(err))
	}
	return nil
}

// UploadTarget implements port.ObjectStorage: a PUT to our own service carrying a signed
// grant for key, contentType and at most size bytes, valid for ttl (capped by MaxUploadTTL).
func (l *Local) UploadTarget(ctx context.Context, key, contentType string, size int64, ttl time.Duration) (port.UploadTarget, error) {
	const op = "storage.Local.UploadTarget"
	if err := ValidateKey(key); err != nil {
		return port.UploadTarget{}, fmt.Errorf("%s: %w", op, err)
	}
	if size < 0 || contentType == "" {
		return port.UploadTarget{}, fmt.Errorf("%s: %w", op, port.ErrObjectKeyInvalid.WithMessage("an upload needs a size and a content type"))
	}
	if ttl <= 0 || ttl > l.cfg.MaxUploadTTL {
		ttl = l.cfg.MaxUploadTTL
	}
	exp := l.cfg.Now().Add(ttl).Truncate(time.Second)
	token := l.signGrant(UploadGrant{Key: key, ContentType: contentType, MaxSize: size, ExpiresAt: exp})
	return port.UploadTarget{
		Method:    "PUT",
		URL:       strings.TrimRight(l.cfg.PublicBaseURL, "/") + l.cfg.UploadPath + token,
		Headers:   map[string]string{"Content-Type": contentType},
		ExpiresAt: exp,
	}, nil
}

// CommitUpload implements port.ObjectStorage. Local uploads write the key itself, once
// (UploadHandler refuses a second one), so committing is describing the object.
func (l *Local) CommitUpload(ctx context.Context, key string) (port.ObjectInfo, error) {
	info, err := l.Stat(ctx, key)
	if err != nil {
		return port.ObjectInfo{}, fmt.Errorf("storage.Local.CommitUpload: %w", err)
	}
	return info, nil
}

func notFound(err error) error {
	if errors.Is(err, fs.ErrNotExist) || strings.Contains(err.Error(), "not a directory") {
		return port.ErrObjectNotFound
	}
	return port.ErrStorageUnavailable.WithCause(err)
}

// copyLimited copies r to w. With size >= 0 it requires exactly size bytes (more →
// ErrObjectTooLarge, fewer → ErrSizeMismatch); with size < 0 it copies to EOF. A read error
// that is already a domain error (e.g. an upload limit) is returned as is.
func copyLimited(ctx context.Context, w io.Writer, r io.Reader, size int64) (int64, error) {
	src := &ctxReader{ctx: ctx, r: r}
	var n int64
	var err error
	if size >= 0 {
		n, err = io.Copy(w, io.LimitReader(src, size+1))
	} else {
		n, err = io.Copy(w, src)
	}
	if err != nil {
		if isDomain(err) {
			return n, err
		}
		if ctx.Err() != nil {
			return n, ctx.Err()
		}
		return n, port.ErrStorageUnavailable.WithMessage("the object could not be written").WithCause(err)
	}
	if size >= 0 && n > size {
		return n, port.ErrObjectTooLarge
	}
	if size >= 0 && n < size {
		return n, ErrSizeMismatch
	}
	return n, nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
