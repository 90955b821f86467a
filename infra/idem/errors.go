package idem

import (
	"strings"

	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// HTTP header names of the idempotency contract (docs/http-api.md, "Idempotency").
const (
	// HeaderKey is the request header carrying the client's key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is set to "true" on a response answered from a stored record.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderRetention carries the retention of records, in seconds (see Guard.RetentionHeader).
	HeaderRetention = "Idempotency-Retention"
)

// Public error codes. They are part of the API contract and never change.
const (
	// CodeKeyMissing: an idempotent endpoint was called without Idempotency-Key (400).
	CodeKeyMissing = "IDEMPOTENCY_KEY_MISSING"
	// CodeKeyInvalid: the key is not one UUID, or the header was sent more than once (400).
	CodeKeyInvalid = "IDEMPOTENCY_KEY_INVALID"
	// CodeKeyReused: the key was used before for a request with another fingerprint (409).
	CodeKeyReused = "IDEMPOTENCY_KEY_REUSED"
	// CodeRequestInProgress: a request with the same key is still executing (409, Retry-After).
	CodeRequestInProgress = "IDEMPOTENCY_REQUEST_IN_PROGRESS"
	// CodeResponseTooLarge: the response is larger than a record may store; nothing was
	// committed (500: a server-side limit, not the client's fault).
	CodeResponseTooLarge = "IDEMPOTENCY_RESPONSE_TOO_LARGE"
)

// The errors of this package, as *domain.Error. Match them with errors.Is; the middleware
// returns copies (with RetryAfter, or a cause for logs).
var (
	ErrKeyMissing = domain.NewError(domain.KindInvalid, CodeKeyMissing,
		"this endpoint requires an Idempotency-Key header holding a UUID")
	ErrKeyInvalid = domain.NewError(domain.KindInvalid, CodeKeyInvalid,
		"the Idempotency-Key header must be sent once and hold a UUID")
	ErrKeyReused = domain.NewError(domain.KindConflict, CodeKeyReused,
		"this Idempotency-Key was already used for a different request")
	ErrRequestInProgress = domain.NewError(domain.KindConflict, CodeRequestInProgress,
		"a request with this Idempotency-Key is still being processed; retry later with the same key")
	ErrResponseTooLarge = domain.NewError(domain.KindInternal, CodeResponseTooLarge,
		"the response is too large to be kept for idempotent replay; nothing was changed")
)

// ParseKey parses the values of the Idempotency-Key header (http.Header.Values(HeaderKey)).
// No value, or one blank value, is ErrKeyMissing. Several values (a repeated header), a value
// that is not a UUID in its 36-character form (8-4-4-4-12 hex, either case), or the nil UUID
// is ErrKeyInvalid. Both are KindInvalid (400).
func ParseKey(headerValues []string) (uuid.UUID, error) {
	switch {
	case len(headerValues) == 0:
		return uuid.Nil, ErrKeyMissing
	case len(headerValues) > 1:
		return uuid.Nil, ErrKeyInvalid.WithMessage("send the Idempotency-Key header once")
	}
	v := strings.TrimSpace(headerValues[0])
	if v == "" {
		return uuid.Nil, ErrKeyMissing
	}
	if len(v) != 36 {
		return uuid.Nil, ErrKeyInvalid
	}
	k, err := uuid.Parse(v)
	if err != nil || k == uuid.Nil {
		return uuid.Nil, ErrKeyInvalid
	}
	return k, nil
}
