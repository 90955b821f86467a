package port

// External systems (docs/external-systems.md): the marketplace gateway, the AI provider,
// object storage, the material fetcher and the credential cipher. Each has an HTTP (or disk)
// adapter in infra and, for the marketplace and the AI provider, an in-memory sandbox that
// speaks the same protocol.
//
// Error contract shared by every port below: adapters return *domain.Error values (or wrap
// them with the operation, "platform.CreateProduct: %w"), so callers branch with errors.Is on
// the sentinels declared here and read Kind/Code/RetryAfter with errors.As(&*domain.Error).
// Error strings never contain a credential, a presigned URL, a request body, or more than a
// bounded, sanitized snippet of a response body; they are safe to log and to store as an
// operation's internal error, but they are not client messages: map them by Code.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"
	"unicode"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"

	"github.com/listingkit/listing/domain"
)

// ---------------------------------------------------------------------------------------------
// Credentials

// Credentials are a store's secret credentials for its marketplace, {"api_key": "..."} for the
// gateway protocol. The secret is reachable only through APIKey and SecretJSON; every way a
// value is printed, logged or marshaled by accident (fmt verbs including %#v and %+v, slog,
// encoding/json, a field of a larger struct) shows "[REDACTED]".
//
// Persist credentials only sealed by a CredentialCipher: SecretJSON gives the plaintext to
// seal, ParseCredentials reads it back after Open. The zero value holds no key.
type Credentials struct {
	// A pointer to a string, so that even reflection-based printing of an enclosing struct
	// (which does not call methods on unexported fields) shows an address, never the key.
	apiKey *string
}

// maxAPIKeyLen bounds an accepted api_key.
const maxAPIKeyLen = 4096

// redacted is what every accidental rendering of Credentials shows.
const redacted = "[REDACTED]"

// ErrCredentialsInvalid is returned by ParseCredentials and Credentials.UnmarshalJSON for
// malformed credentials. Its message never quotes the input.
var ErrCredentialsInvalid = domain.NewError(domain.KindInvalid, "CREDENTIALS_INVALID",
	`credentials must be an object {"api_key": "<non-empty string>"}`).WithField("credentials", "invalid")

// NewCredentials returns credentials holding apiKey, or ErrCredentialsInvalid when apiKey is
// empty, too long or contains control characters or spaces.
func NewCredentials(apiKey string) (Credentials, error) {
	if apiKey == "" || len(apiKey) > maxAPIKeyLen {
		return Credentials{}, ErrCredentialsInvalid
	}
	for _, r := range apiKey {
		if unicode.IsControl(r) || unicode.IsSpace(r) {
			return Credentials{}, ErrCredentialsInvalid
		}
	}
	return Credentials{apiKey: &apiKey}, nil
}

// ParseCredentials reads the JSON object {"api_key": "..."} (unknown, duplicate and
// case-variant names are refused). It
// is the inverse of SecretJSON and what the HTTP layer uses on request bodies.
func ParseCredentials(raw []byte) (Credentials, error) {
	var v struct {
		APIKey *string `json:"api_key"`
	}
	// JSON v2 semantics, as request bodies are read: exact names, no duplicate, no unknown
	// member, exactly one value.
	if err := jsonv2.Unmarshal(raw, &v, jsonv2.RejectUnknownMembers(true)); err != nil || v.APIKey == nil {
		// The decoder's message may quote a field name the client sent: never return it.
		return Credentials{}, ErrCredentialsInvalid
	}
	return NewCredentials(*v.APIKey)
}

// APIKey returns the secret. Call it only where the secret is sent (the Authorization header).
func (c Credentials) APIKey() string {
	if c.apiKey == nil {
		return ""
	}
	return *c.apiKey
}

// IsZero reports whether c holds no key.
func (c Credentials) IsZero() bool { return c.apiKey == nil || *c.apiKey == "" }

// SecretJSON returns the plaintext {"api_key": "..."} to seal with a CredentialCipher. The
// caller must not log, store or return it unsealed.
func (c Credentials) SecretJSON() ([]byte, error) {
	if c.IsZero() {
		return nil, ErrCredentialsInvalid
	}
	return json.Marshal(struct {
		APIKey string `json:"api_key"`
	}{*c.apiKey})
}

// String implements fmt.Stringer and always redacts.
func (c Credentials) String() string { return redacted }

// GoString implements fmt.GoStringer (%#v) and always redacts.
func (c Credentials) GoString() string { return "port.Credentials{" + redacted + "}" }

// Format implements fmt.Formatter so that every verb (%v %+v %#v %s %q %x %d …) redacts.
func (c Credentials) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, c.GoString())
		return
	}
	_, _ = io.WriteString(f, redacted)
}

// LogValue implements slog.LogValuer and always redacts.
func (c Credentials) LogValue() slog.Value { return slog.StringValue(redacted) }

// MarshalJSON always writes "[REDACTED]": an accidental json.Marshal never leaks the key.
// Use SecretJSON for the real value.
func (c Credentials) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText always writes "[REDACTED]" (encoding.TextMarshaler, used by some encoders).
func (c Credentials) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// UnmarshalJSON accepts {"api_key": "..."} as ParseCredentials does, so request bodies can be
// decoded into a Credentials field. Note the asymmetry: MarshalJSON redacts.
func (c *Credentials) UnmarshalJSON(b []byte) error {
	parsed, err := ParseCredentials(b)
	if err != nil {
		return err
	}
	*c = parsed
	return nil
}

// ---------------------------------------------------------------------------------------------
// Shared error types

// RateLimitedError is returned when an external system answered 429. RetryAfter is the wait
// it asked for (a positive default when it named none). errors.Is(err, Sentinel) holds for the
// Sentinel it was made with (ErrPlatformRateLimited, ErrAIRateLimited), and errors.As to
// *domain.Error yields that sentinel with RetryAfter set.
type RateLimitedError struct {
	// Service names the external system: "platform" or "ai".
	Service string
	// RetryAfter is how long to wait before the next call.
	RetryAfter time.Duration
	// Sentinel is the domain error this one matches with errors.Is.
	Sentinel *domain.Error
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("%s rate limited: retry after %s", e.Service, e.RetryAfter)
}

// Unwrap returns the sentinel with RetryAfter set, so errors.Is/As see a *domain.Error.
func (e *RateLimitedError) Unwrap() error {
	if e.Sentinel == nil {
		return domain.ErrRateLimited.WithRetryAfter(e.RetryAfter)
	}
	return e.Sentinel.WithRetryAfter(e.RetryAfter)
}

// IsPermanent reports whether err from an external-system port means that retrying the same
// call cannot succeed (bad credentials, a rejected request, a refused URL, an oversized
// object). Rate limits, transient failures and unknown errors are not permanent.
func IsPermanent(err error) bool {
	var de *domain.Error
	if !errors.As(err, &de) {
		return false
	}
	if errors.Is(err, ErrAIUnauthorized) || errors.Is(err, ErrCredentialsKeyUnknown) ||
		errors.Is(err, ErrCredentialsUndecryptable) {
		return true
	}
	switch de.Kind {
	case domain.KindUnavailable, domain.KindRateLimited, domain.KindInternal:
		return false
	default:
		return true
	}
}

// ---------------------------------------------------------------------------------------------
// Marketplace

// Marketplace errors. Workers branch on them with errors.Is / errors.As.
var (
	// ErrPlatformUnauthorized: the platform refused the store's credentials (HTTP 401/403).
	// Permanent until the credentials are replaced.
	ErrPlatformUnauthorized = domain.NewError(domain.KindInvalid, "PLATFORM_UNAUTHORIZED",
		"the marketplace rejected the store's credentials")
	// ErrPlatformRateLimited is the sentinel of a *RateLimitedError from the marketplace.
	ErrPlatformRateLimited = domain.NewError(domain.KindRateLimited, "PLATFORM_RATE_LIMITED",
		"the marketplace is rate limiting this store; retry later")
	// ErrPlatformTransient: 5xx, a timeout or a network failure. Retry with backoff; for a
	// create, the outcome is unknown (look the product up by external_ref before retrying).
	ErrPlatformTransient = domain.NewError(domain.KindUnavailable, "PLATFORM_UNAVAILABLE",
		"the marketplace is unavailable; retry later")
	// ErrPlatformRejected: any other 4xx (the request itself is wrong). Permanent.
	ErrPlatformRejected = domain.NewError(domain.KindInvalid, "PLATFORM_REJECTED",
		"the marketplace rejected the request")
)

// VerifyResult is the platform's answer to a credential check.
type VerifyResult struct {
	Valid    bool
	ShopName string
	// Reason explains an invalid result in the platform's words (bounded, no secrets).
	Reason string
}

// ProductInput is the content a first publication or a listing update sends to the platform.
type ProductInput struct {
	// ExternalRef is our identifier for the listing (the publication id); the worker looks
	// it up before creating, so a gateway that ignores Idempotency-Key never gets two.
	ExternalRef string
	Title       string
	Description string
	// Price is a decimal string, e.g. "19.90".
	Price string
	// Currency is an ISO 4217 code, e.g. "EUR".
	Currency string
	// Images are URLs the platform fetches.
	Images []string
}

// PlatformProduct is a product as the platform knows it.
type PlatformProduct struct {
	ID          string
	ExternalRef string
	Title       string
	Description string
	Price       string
	Currency    string
	Images      []string
	CreatedAt   time.Time
	UpdatedAt   time.Time
}

// ProductPage is one page of ListProducts. NextPageToken is empty on the last page.
type ProductPage struct {
	Items         []PlatformProduct
	NextPageToken string
}

// Marketplace is the marketplace gateway (one protocol for every platform). Implementations
// are safe for concurrent use. Every method sends creds only as the Authorization header of
// its own request; creds never appear in an error or a log line.
type Marketplace interface {
	// VerifyStore checks creds for the shop on platform. A credential the platform rejects
	// (valid:false, or HTTP 401/403) is an answer, VerifyResult{Valid: false}, not an error;
	// errors are rate limits, transient failures and rejected requests. Read-only: safe to
	// repeat.
	VerifyStore(ctx context.Context, creds Credentials, platform, shopID string) (VerifyResult, error)
	// CreateProduct creates a product, sending idempotencyKey (our publication id) as the
	// Idempotency-Key header: a gateway that honors it returns the first product again. A
	// gateway may ignore it, so callers look up by ExternalRef first (and again after a
	// transient error, whose outcome is unknown).
	CreateProduct(ctx context.Context, creds Credentials, idempotencyKey string, in ProductInput) (PlatformProduct, error)
	// UpdateProduct replaces the content of the platform product id (the gateway's PUT
	// /v1/products/{id}) with in, sending idempotencyKey (our listing update id) as the
	// Idempotency-Key header: a gateway that honors it answers a repeated request from its
	// saved response without applying it again. A replacement is idempotent by itself (the
	// same request twice leaves the same content) but not ordered: the gateway keeps the
	// last request it applied, so a caller must never let a request with older content land
	// after one with newer content (listing updates send one request per product at a time).
	// An unknown id is ErrPlatformRejected; a transient error's outcome is unknown (the
	// content may have been replaced).
	UpdateProduct(ctx context.Context, creds Credentials, idempotencyKey, id string, in ProductInput) (PlatformProduct, error)
	// DeleteProduct deletes the platform product id (the gateway's DELETE /v1/products/{id}).
	// Idempotent: a product that no longer exists counts as deleted (the gateway's 404), so a
	// repeat after a lost answer succeeds. A transient error's outcome is unknown (the product
	// may be gone): repeat the call.
	DeleteProduct(ctx context.Context, creds Credentials, id string) error
	// FindProductByExternalRef returns the oldest product with that external_ref, or (nil,
	// nil) when there is none.
	FindProductByExternalRef(ctx context.Context, creds Credentials, ref string) (*PlatformProduct, error)
	// ListProducts returns one page of the store's products; pageToken "" is the first page.
	// limit <= 0 means the gateway's default. Read-only.
	ListProducts(ctx context.Context, creds Credentials, limit int, pageToken string) (ProductPage, error)
}

// ---------------------------------------------------------------------------------------------
// AI provider

// AI provider errors.
var (
	// ErrAIUnauthorized: the provider refused our AI_API_KEY (401/403). Permanent until an
	// operator fixes the configuration.
	ErrAIUnauthorized = domain.NewError(domain.KindInternal, "AI_PROVIDER_UNAUTHORIZED",
		"the AI provider rejected the service's key")
	// ErrAIRateLimited is the sentinel of a *RateLimitedError from the AI provider.
	ErrAIRateLimited = domain.NewError(domain.KindRateLimited, "AI_PROVIDER_RATE_LIMITED",
		"the AI provider is rate limiting; retry later")
	// ErrAITransient: 5xx, timeouts, network failures. With the same idempotency key a retry
	// does not call the model twice where the provider honors the key.
	ErrAITransient = domain.NewError(domain.KindUnavailable, "AI_PROVIDER_UNAVAILABLE",
		"the AI provider is unavailable; retry later")
	// ErrAIRejected: other 4xx (bad input, content policy, exhausted quota). Permanent.
	ErrAIRejected = domain.NewError(domain.KindInvalid, "AI_PROVIDER_REJECTED",
		"the AI provider rejected the request")
)

// Usage is what one provider call consumed, for the billing ledger.
type Usage struct {
	PromptTokens     int
	CompletionTokens int
	// Images is the number of images generated.
	Images int
}

// AIResult is the outcome of CompleteText.
type AIResult struct {
	Output string
	Usage  Usage
	// Model is the model that answered, as the provider names it.
	Model string
	// ProviderRequestID identifies the call at the provider (response id or x-request-id).
	ProviderRequestID string
}

// ImageResult is the outcome of GenerateImage: the image bytes (decoded), ready for storage.
type ImageResult struct {
	Image []byte
	// ContentType is sniffed from Image, e.g. "image/png".
	ContentType string
	// RevisedPrompt is the provider's rewrite of the prompt, when it made one.
	RevisedPrompt     string
	Usage             Usage
	Model             string
	ProviderRequestID string
}

// AIProvider is an OpenAI-compatible provider. Safe for concurrent use. idempotencyKey is
// derived from the AI task (e.g. its id) and sent as the Idempotency-Key header: a provider
// that honors it answers a repeated call from its cache without running the model or billing
// again. Prompts and outputs are never logged by the adapter.
type AIProvider interface {
	// CompleteText runs a chat completion of prompt (one user message). model "" means the
	// configured default.
	CompleteText(ctx context.Context, idempotencyKey, model, prompt string) (AIResult, error)
	// GenerateImage generates one image for prompt with the configured image model.
	GenerateImage(ctx context.Context, idempotencyKey, prompt string) (ImageResult, error)
}

// ---------------------------------------------------------------------------------------------
// Object storage

// Object storage errors.
var (
	// ErrObjectNotFound: no object under the key.
	ErrObjectNotFound = domain.NewError(domain.KindNotFound, "OBJECT_NOT_FOUND", "the object does not exist")
	// ErrObjectKeyInvalid: the key is empty, too long, absolute, contains "..", "\\", control
	// characters or empty segments.
	ErrObjectKeyInvalid = domain.NewError(domain.KindInvalid, "OBJECT_KEY_INVALID", "the object key is not valid")
	// ErrObjectTooLarge: a Put or an upload sent more bytes than allowed.
	ErrObjectTooLarge = domain.NewError(domain.KindTooLarge, "OBJECT_TOO_LARGE", "the object is larger than allowed")
	// ErrStorageUnavailable: the storage backend failed; retry later.
	ErrStorageUnavailable = domain.NewError(domain.KindUnavailable, "STORAGE_UNAVAILABLE", "object storage is unavailable; retry later")
)

// ObjectInfo describes a stored object.
type ObjectInfo struct {
	Key         string
	Size        int64
	ContentType string
	// ETag is the backend's version tag (opaque; may be empty).
	ETag    string
	ModTime time.Time
}

// UploadTarget tells a client how to send an object's bytes directly: an HTTP request with
// Method to URL carrying Headers. The URL is a bearer capability until it expires: hand it only
// to the client that asked; never store it in events, operations or logs.
type UploadTarget struct {
	Method    string
	URL       string
	Headers   map[string]string
	ExpiresAt time.Time
}

// ObjectStorage stores objects under deterministic keys (e.g. "ws/<id>/media/<id>/original"):
// Put twice on a key overwrites, so deriving twice never duplicates. Keys are not secrets but
// are kept out of events and client errors. Implementations are safe for concurrent use.
type ObjectStorage interface {
	// Put stores r under key. size is the exact length, or -1 when unknown. A reader holding
	// more than size bytes fails with ErrObjectTooLarge and stores nothing. Readers see the
	// old or the new object, never a partial one.
	Put(ctx context.Context, key string, r io.Reader, size int64, contentType string) error
	// Get opens the object; the caller closes the reader. ErrObjectNotFound when absent.
	Get(ctx context.Context, key string) (io.ReadCloser, ObjectInfo, error)
	// Stat describes the object; ErrObjectNotFound when absent.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Delete removes the object; deleting an absent object is not an error.
	Delete(ctx context.Context, key string) error
	// UploadTarget returns how a client uploads up to size bytes of contentType for key within
	// ttl: a URL on our own service for local storage, a presigned PUT for S3 (which enforces
	// the exact size through a signed Content-Length). The bytes become the object under key
	// only through CommitUpload, and only once.
	UploadTarget(ctx context.Context, key, contentType string, size int64, ttl time.Duration) (UploadTarget, error)
	// CommitUpload makes the bytes a client sent to key's upload target the object under key
	// and describes it; ErrObjectNotFound when nothing was uploaded. An upload is committed
	// once: when the object under key exists, it is returned unchanged, whatever was sent to
	// the upload target since, so a used upload URL can never replace a stored object.
	CommitUpload(ctx context.Context, key string) (ObjectInfo, error)
}

// ---------------------------------------------------------------------------------------------
// Fetcher

// Fetcher errors (public codes: the HTTP layer maps them to problem+json as they are).
var (
	// ErrSourceURLInvalid: not an absolute http(s) URL, or it carries user info (the
	// domain's error: see domain.ValidateSourceURL).
	ErrSourceURLInvalid = domain.ErrSourceURLInvalid
	// ErrSourceURLForbidden: the URL (or a redirect) leads to a private, loopback,
	// link-local or otherwise non-public address.
	ErrSourceURLForbidden = domain.NewError(domain.KindInvalid, "SOURCE_URL_FORBIDDEN",
		"source_url leads to an address that is not allowed").WithField("source_url", "forbidden address")
	// ErrSourceTooLarge: the source is larger than the allowed maximum.
	ErrSourceTooLarge = domain.NewError(domain.KindTooLarge, "SOURCE_TOO_LARGE",
		"the source is larger than allowed")
	// ErrSourceUnreachable: DNS, connection, timeout or a 5xx; retry later.
	ErrSourceUnreachable = domain.NewError(domain.KindUnavailable, "SOURCE_UNREACHABLE",
		"the source could not be fetched; retry later")
	// ErrSourceRejected: the source answered with a 4xx status or too many redirects. Permanent.
	ErrSourceRejected = domain.NewError(domain.KindInvalid, "SOURCE_REJECTED",
		"the source refused the download")
)

// FetchInfo describes a fetched source.
type FetchInfo struct {
	// ContentType is the Content-Type the source declared (may be empty).
	ContentType string
	// Size is the declared Content-Length, or -1 when unknown.
	Size int64
	// FinalURL is the URL after redirects.
	FinalURL string
}

// Fetcher downloads material from a public URL with the SSRF guard, a time limit and a size
// limit. Safe for concurrent use.
type Fetcher interface {
	// CheckURL validates sourceURL without downloading and without DNS: scheme, syntax, and
	// that its host is neither a refused literal address nor a localhost name. The HTTP
	// layer calls it to refuse bad input with ErrSourceURLInvalid / ErrSourceURLForbidden
	// before anything is written. Host names are resolved and checked only by Fetch, where
	// the connection is made, so a passing CheckURL is not a promise.
	CheckURL(ctx context.Context, sourceURL string) error
	// Fetch opens sourceURL; the caller reads and closes the body. A body longer than maxBytes
	// fails (at once from Content-Length, or while reading) with ErrSourceTooLarge; the total
	// time limit covers reading the body too.
	Fetch(ctx context.Context, sourceURL string, maxBytes int64) (io.ReadCloser, FetchInfo, error)
}

// ---------------------------------------------------------------------------------------------
// Credential cipher

// Credential cipher errors.
var (
	// ErrCredentialsKeyUnknown: the sealed value names a key id that is not configured
	// (a key was removed from CREDENTIALS_KEYS too early).
	ErrCredentialsKeyUnknown = domain.NewError(domain.KindInternal, "CREDENTIALS_KEY_UNKNOWN",
		"the credentials were sealed with a key that is not configured")
	// ErrCredentialsUndecryptable: authentication failed (tampered ciphertext, or associated
	// data of another store).
	ErrCredentialsUndecryptable = domain.NewError(domain.KindInternal, "CREDENTIALS_UNDECRYPTABLE",
		"the stored credentials cannot be decrypted")
)

// CredentialCipher seals secrets at rest with an authenticated cipher and key ids for
// rotation. Safe for concurrent use.
type CredentialCipher interface {
	// Seal encrypts plaintext with the current key, binding associatedData (use
	// CredentialsAD) so the sealed value opens only for the same associated data. Store
	// sealed and keyID together.
	Seal(plaintext, associatedData []byte) (sealed []byte, keyID string, err error)
	// Open decrypts a value sealed under keyID (current or older key) with the same
	// associated data.
	Open(sealed []byte, keyID string, associatedData []byte) ([]byte, error)
}

// CredentialsAD returns the associated data that binds a store's sealed credentials to the
// store and its workspace: a row copied to another store or workspace does not open.
func CredentialsAD(workspaceID, storeID uuid.UUID) []byte {
	return []byte("store-credentials:v1:" + workspaceID.String() + ":" + storeID.String())
}

// IntegrationSecretAD returns the associated data that binds an integration's sealed secret
// to the integration and its workspace.
func IntegrationSecretAD(workspaceID, integrationID uuid.UUID) []byte {
	return []byte("integration-secret:v1:" + workspaceID.String() + ":" + integrationID.String())
}
