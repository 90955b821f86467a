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

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
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

// decodeStrict decodes exactly one JSON value into dst with decodeJSON. An empty body decodes
// as {}.
func decodeStrict(body []byte, dst any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		body = []byte("{}")
	}
	return decodeJSON(body, dst)
}

// decodeJSON is the one decoder of request bodies (HTTP and command stream): JSON v2
// semantics (github.com/go-json-experiment/json), so member names match the schema's exactly
// (case-sensitive), and a body is refused when it
//   - has a member the schema does not name, or one differing from it only in case
//     (UNKNOWN_FIELD, naming it);
//   - names a member twice, at any depth (UNKNOWN_FIELD, naming it);
//   - is not exactly one JSON value, or not the schema's kind (MALFORMED_JSON);
//   - holds a value of the wrong type (VALIDATION_FAILED naming the field), or one a field's
//     own UnmarshalJSON refused (its *domain.Error).
//
// Field names are given as the dotted path from the body's top (credentials.api_key).
func decodeJSON(body []byte, dst any) error {
	err := jsonv2.Unmarshal(body, dst, jsonv2.RejectUnknownMembers(true))
	if err == nil {
		return nil
	}
	var domainErr *domain.Error
	var semErr *jsonv2.SemanticError
	var synErr *jsontext.SyntacticError
	switch {
	case errors.As(err, &domainErr): // a field's own UnmarshalJSON refused its value
		return domainErr
	case errors.As(err, &synErr) && errors.Is(synErr.Err, jsontext.ErrDuplicateName):
		name := fieldPath(synErr.JSONPointer)
		return errUnknownField.WithMessage("field %q appears more than once", name).WithField(name, "duplicate")
	case errors.As(err, &semErr) && errors.Is(semErr.Err, jsonv2.ErrUnknownName):
		name := fieldPath(semErr.JSONPointer)
		return errUnknownField.WithMessage("unknown field %q (names are case-sensitive)", name).WithField(name, "not accepted")
	case errors.As(err, &semErr) && semErr.JSONPointer != "":
		return domain.Invalid(fieldPath(semErr.JSONPointer), "has the wrong type")
	case errors.As(err, &semErr):
		return errMalformed.WithMessage("the body must be a JSON object")
	case errors.As(err, &synErr) && synErr.Err != nil && strings.Contains(synErr.Err.Error(), "after top-level value"):
		return errMalformed.WithMessage("the body must hold exactly one JSON value")
	default:
		return errMalformed
	}
}

// fieldPath renders a JSON pointer (/credentials/api_key) as a dotted path
// (credentials.api_key).
func fieldPath(p jsontext.Pointer) string {
	var parts []string
	for tok := range p.Tokens() {
		parts = append(parts, tok)
	}
	return strings.Join(parts, ".")
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
