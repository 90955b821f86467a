package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/listingkit/listing/domain"
)

// The errors of reading a JSON body: codes the HTTP layer itself produces.
var (
	errBodyTooLarge = domain.NewError(domain.KindTooLarge, "BODY_TOO_LARGE", "the request body is too large")
	errMediaType    = domain.NewError(domain.KindUnsupportedMedia, "UNSUPPORTED_MEDIA_TYPE", "send Content-Type: application/json")
	errMalformed    = domain.NewError(domain.KindInvalid, "MALFORMED_JSON", "the body is not valid JSON")
	errUnknownField = domain.NewError(domain.KindInvalid, "UNKNOWN_FIELD", "the body has a field this endpoint does not accept")
)

// readBody reads the whole body up to limit bytes, after checking it is JSON, and refuses a
// body that is not UTF-8 (RFC 8259 §8.1) with MALFORMED_JSON rather than let the decoder
// replace the bad bytes. The bytes are returned so that idempotent endpoints can fingerprint
// exactly what was decoded.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "application/json" {
		return nil, errMediaType
	}
	if r.ContentLength > limit {
		return nil, errBodyTooLarge
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, errBodyTooLarge
	}
	if err != nil {
		return nil, errMalformed.WithMessage("the body could not be read")
	}
	if !utf8.Valid(body) {
		return nil, errMalformed.WithMessage("the body is not valid UTF-8")
	}
	return body, nil
}

// decodeStrict decodes exactly one JSON value into dst, refusing unknown fields and
// trailing data. An empty body decodes as {}.
func decodeStrict(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		var domainErr *domain.Error
		switch {
		case errors.As(err, &domainErr): // a field's own UnmarshalJSON refused its value
			return domainErr
		case errors.As(err, &typeErr):
			field := typeErr.Field
			if field == "" {
				return errMalformed.WithMessage("the body must be a JSON object")
			}
			return domain.Invalid(field, "has the wrong type")
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return errUnknownField.WithMessage("unknown field %q", name).WithField(name, "not accepted")
		default:
			return errMalformed
		}
	}
	if dec.More() {
		return errMalformed.WithMessage("the body must hold exactly one JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errMalformed.WithMessage("the body must hold exactly one JSON value")
	}
	return nil
}

// writeJSON writes v as JSON with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
