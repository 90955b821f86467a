package storage

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// UploadGrant is what an upload token allows: one complete PUT of at most MaxSize bytes of
// ContentType to Key before ExpiresAt. The grant is spent when that PUT stores the object.
type UploadGrant struct {
	Key         string
	ContentType string
	MaxSize     int64
	ExpiresAt   time.Time
}

type grantWire struct {
	Key         string `json:"k"`
	ContentType string `json:"ct"`
	MaxSize     int64  `json:"n"`
	Exp         int64  `json:"exp"`
}

const tokenContext = "listing-upload-v1."

func (l *Local) mac(payload string) []byte {
	m := hmac.New(sha256.New, l.cfg.UploadSigningKey)
	m.Write([]byte(tokenContext))
	m.Write([]byte(payload))
	return m.Sum(nil)
}

func (l *Local) signGrant(g UploadGrant) string {
	raw, _ := json.Marshal(grantWire{Key: g.Key, ContentType: g.ContentType, MaxSize: g.MaxSize, Exp: g.ExpiresAt.Unix()})
	payload := base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + base64.RawURLEncoding.EncodeToString(l.mac(payload))
}

// VerifyUploadToken checks token's signature and expiry and returns its grant:
// ErrUploadTokenInvalid for a malformed or forged token, ErrUploadTokenExpired past its time.
func (l *Local) VerifyUploadToken(token string) (UploadGrant, error) {
	const op = "storage.VerifyUploadToken"
	payload, sig, ok := strings.Cut(token, ".")
	if !ok || len(token) > 4096 {
		return UploadGrant{}, fmt.Errorf("%s: %w", op, ErrUploadTokenInvalid)
	}
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil || !hmac.Equal(got, l.mac(payload)) {
		return UploadGrant{}, fmt.Errorf("%s: %w", op, ErrUploadTokenInvalid)
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return UploadGrant{}, fmt.Errorf("%s: %w", op, ErrUploadTokenInvalid)
	}
	var w grantWire
	if err := json.Unmarshal(raw, &w); err != nil || ValidateKey(w.Key) != nil || w.MaxSize < 0 || w.ContentType == "" {
		return UploadGrant{}, fmt.Errorf("%s: %w", op, ErrUploadTokenInvalid)
	}
	g := UploadGrant{Key: w.Key, ContentType: w.ContentType, MaxSize: w.MaxSize, ExpiresAt: time.Unix(w.Exp, 0).UTC()}
	if !l.cfg.Now().Before(g.ExpiresAt) {
		return UploadGrant{}, fmt.Errorf("%s: %w", op, ErrUploadTokenExpired)
	}
	return g, nil
}

// UploadHandlerConfig configures Local.UploadHandler.
type UploadHandlerConfig struct {
	// OnError writes an error response. Default: RFC 9457 problem+json with the error's code
	// (403 token invalid/expired, 409 upload already complete, 413 too large, 415 content
	// type, 400 size mismatch, 503).
	OnError func(w http.ResponseWriter, r *http.Request, err error)
}

// UploadHandler returns the handler of "PUT {UploadPath}{token}". It takes the token from
// r.PathValue("token") when the router set it, else from the last path segment. It checks the
// grant and the Content-Type, then streams the body into the store, refusing more than the
// granted size (413; nothing is stored). It answers 200 with an ETag and no body, as S3 does.
// A grant is single use: once an object exists under its key (its first complete upload),
// every other PUT, later or racing, gets 409 ErrUploadAlreadyCompleted and changes nothing;
// a refused or broken upload stores nothing and does not spend the grant.
// It never logs the token, the key or the body.
func (l *Local) UploadHandler(cfg UploadHandlerConfig) http.Handler {
	onError := cfg.OnError
	if onError == nil {
		onError = WriteProblem
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			w.Header().Set("Allow", http.MethodPut)
			onError(w, r, domain.ErrMethodNotAllowed.WithMessage("use PUT to upload"))
			return
		}
		token := r.PathValue("token")
		if token == "" {
			token = r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		}
		g, err := l.VerifyUploadToken(token)
		if err != nil {
			onError(w, r, err)
			return
		}
		if !sameMediaType(r.Header.Get("Content-Type"), g.ContentType) {
			onError(w, r, ErrUploadContentType)
			return
		}
		if r.ContentLength > g.MaxSize {
			onError(w, r, port.ErrObjectTooLarge)
			return
		}
		if _, err := l.Stat(r.Context(), g.Key); err == nil {
			onError(w, r, ErrUploadAlreadyCompleted) // before reading a body that cannot be kept
			return
		}
		body := &limitReader{r: r.Body, left: g.MaxSize}
		if err := l.create(r.Context(), g.Key, body, g.ContentType); err != nil {
			l.cfg.Logger.WarnContext(r.Context(), "upload refused", slog.String("error", errorCode(err)))
			onError(w, r, err)
			return
		}
		info, err := l.Stat(r.Context(), g.Key)
		if err == nil && info.ETag != "" {
			w.Header().Set("ETag", info.ETag)
		}
		l.cfg.Logger.InfoContext(r.Context(), "upload stored", slog.Int64("size", info.Size))
		w.WriteHeader(http.StatusOK)
	})
}

func sameMediaType(got, want string) bool {
	g, _, err1 := mime.ParseMediaType(got)
	w, _, err2 := mime.ParseMediaType(want)
	return err1 == nil && err2 == nil && strings.EqualFold(g, w)
}

// limitReader fails with port.ErrObjectTooLarge once more than left bytes are read.
type limitReader struct {
	r    io.Reader
	left int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		return 0, port.ErrObjectTooLarge
	}
	l.left -= int64(n)
	return n, err
}

func isDomain(err error) bool {
	var de *domain.Error
	return errors.As(err, &de)
}

func errorCode(err error) string {
	var de *domain.Error
	if errors.As(err, &de) {
		return de.Code
	}
	return domain.ErrInternal.Code
}

// WriteProblem writes err as RFC 9457 problem+json: the domain error's code and client-safe
// message, or a generic 500. It is UploadHandler's default OnError (409 for an upload
// already complete).
func WriteProblem(w http.ResponseWriter, _ *http.Request, err error) {
	status, code, title := http.StatusInternalServerError, domain.ErrInternal.Code, domain.ErrInternal.Message
	var de *domain.Error
	if errors.As(err, &de) {
		code, title = de.Code, de.Message
		switch de.Kind {
		case domain.KindInvalid:
			status = http.StatusBadRequest
			if de.Code == domain.ErrMethodNotAllowed.Code {
				status = http.StatusMethodNotAllowed
			}
		case domain.KindForbidden:
			status = http.StatusForbidden
		case domain.KindNotFound:
			status = http.StatusNotFound
		case domain.KindConflict:
			status = http.StatusConflict
		case domain.KindTooLarge:
			status = http.StatusRequestEntityTooLarge
		case domain.KindUnsupportedMedia:
			status = http.StatusUnsupportedMediaType
		case domain.KindUnavailable:
			status = http.StatusServiceUnavailable
		}
		if status == http.StatusInternalServerError {
			code, title = domain.ErrInternal.Code, domain.ErrInternal.Message
		}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{
		"type": "about:blank", "title": title, "status": status, "detail": title, "code": code,
	})
}
