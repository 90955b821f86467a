package platform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/outbound"
	"github.com/listingkit/listing/infra/tracing"
)

// DefaultTimeout is Config.Timeout's default: no call lasts longer.
const DefaultTimeout = 15 * time.Second

// Config configures New.
type Config struct {
	// BaseURL of the gateway, PLATFORM_BASE_URL, e.g. "https://gateway.example.com" (paths
	// /v1/... are appended). Required: cmd/app passes the marketplace sandbox's URL when
	// PLATFORM_BASE_URL is unset.
	BaseURL string
	// Timeout bounds each call, reading the response included. Default DefaultTimeout.
	Timeout time.Duration
	// MaxRetryAfter caps a Retry-After the gateway asks for. Default 1h.
	MaxRetryAfter time.Duration
	// HTTPClient sends the requests. Default: a client with its own transport and no
	// client-level timeout (Timeout applies through the context).
	HTTPClient *http.Client
	// UserAgent header. Default "listing-platform/1".
	UserAgent string
	// Logger gets one debug line per call. Default slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = time.Hour
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: tracing.Transport(http.DefaultTransport.(*http.Transport).Clone())}
	}
	if c.UserAgent == "" {
		c.UserAgent = "listing-platform/1"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field without changing c.
func (c Config) Validate() error {
	if c.BaseURL == "" {
		return errors.New("platform: BaseURL (PLATFORM_BASE_URL) is required")
	}
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("platform: BaseURL (PLATFORM_BASE_URL) must be an absolute http(s) URL")
	}
	if u.User != nil {
		return errors.New("platform: BaseURL (PLATFORM_BASE_URL) must not carry user info")
	}
	if c.Timeout < 0 || c.MaxRetryAfter < 0 {
		return errors.New("platform: Timeout and MaxRetryAfter must not be negative")
	}
	return nil
}

// Client is the gateway adapter. Safe for concurrent use.
type Client struct {
	cfg  Config
	base *url.URL
}

var _ port.Marketplace = (*Client)(nil)

// New returns a Client.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("platform.New: %w", err)
	}
	base, _ := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	return &Client{cfg: cfg, base: base}, nil
}

type wireProduct struct {
	ID          string    `json:"id"`
	ExternalRef string    `json:"external_ref"`
	Title       string    `json:"title"`
	Description string    `json:"description"`
	Price       string    `json:"price"`
	Currency    string    `json:"currency"`
	Images      []string  `json:"images"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

func (w wireProduct) port() port.PlatformProduct {
	return port.PlatformProduct{
		ID: w.ID, ExternalRef: w.ExternalRef, Title: w.Title, Description: w.Description,
		Price: w.Price, Currency: w.Currency, Images: w.Images,
		CreatedAt: w.CreatedAt, UpdatedAt: w.UpdatedAt,
	}
}

type wireList struct {
	Items         []wireProduct `json:"items"`
	NextPageToken string        `json:"next_page_token"`
}

// VerifyStore implements port.Marketplace.
func (c *Client) VerifyStore(ctx context.Context, creds port.Credentials, platform, shopID string) (port.VerifyResult, error) {
	const op = "platform.VerifyStore"
	in := map[string]string{"platform": platform, "shop_id": shopID}
	var out struct {
		Valid    bool   `json:"valid"`
		ShopName string `json:"shop_name"`
		Reason   string `json:"reason"`
	}
	err := c.do(ctx, op, creds, http.MethodPost, "/v1/stores/verify", nil, "", in, &out)
	if errors.Is(err, port.ErrPlatformUnauthorized) {
		return port.VerifyResult{Valid: false, Reason: "the marketplace rejected the credentials"}, nil
	}
	if err != nil {
		return port.VerifyResult{}, err
	}
	return port.VerifyResult{
		Valid:    out.Valid,
		ShopName: bounded(out.ShopName, 500),
		Reason:   outbound.Sanitize(out.Reason, 500, creds.APIKey()),
	}, nil
}

// CreateProduct implements port.Marketplace.
func (c *Client) CreateProduct(ctx context.Context, creds port.Credentials, idempotencyKey string, in port.ProductInput) (port.PlatformProduct, error) {
	const op = "platform.CreateProduct"
	if idempotencyKey == "" {
		return port.PlatformProduct{}, fmt.Errorf("%s: an idempotency key is required: %w", op, port.ErrPlatformRejected)
	}
	var out wireProduct
	if err := c.do(ctx, op, creds, http.MethodPost, "/v1/products", nil, idempotencyKey, productBody(in), &out); err != nil {
		return port.PlatformProduct{}, err
	}
	if out.ID == "" {
		return port.PlatformProduct{}, fmt.Errorf("%s: response has no product id: %w", op, port.ErrPlatformTransient)
	}
	return out.port(), nil
}

// UpdateProduct implements port.Marketplace.
func (c *Client) UpdateProduct(ctx context.Context, creds port.Credentials, idempotencyKey, id string, in port.ProductInput) (port.PlatformProduct, error) {
	const op = "platform.UpdateProduct"
	if idempotencyKey == "" || id == "" {
		return port.PlatformProduct{}, fmt.Errorf("%s: an idempotency key and a product id are required: %w", op, port.ErrPlatformRejected)
	}
	var out wireProduct
	if err := c.do(ctx, op, creds, http.MethodPut, "/v1/products/"+url.PathEscape(id), nil, idempotencyKey, productBody(in), &out); err != nil {
		return port.PlatformProduct{}, err
	}
	if out.ID == "" {
		return port.PlatformProduct{}, fmt.Errorf("%s: response has no product id: %w", op, port.ErrPlatformTransient)
	}
	return out.port(), nil
}

// productBody is the JSON body of a create or an update.
func productBody(in port.ProductInput) map[string]any {
	images := in.Images
	if images == nil {
		images = []string{}
	}
	return map[string]any{
		"external_ref": in.ExternalRef, "title": in.Title, "description": in.Description,
		"price": in.Price, "currency": in.Currency, "images": images,
	}
}

// DeleteProduct implements port.Marketplace: a 404 is reported as done (a repeat delete).
func (c *Client) DeleteProduct(ctx context.Context, creds port.Credentials, id string) error {
	const op = "platform.DeleteProduct"
	if id == "" {
		return fmt.Errorf("%s: a product id is required: %w", op, port.ErrPlatformRejected)
	}
	err := c.do(ctx, op, creds, http.MethodDelete, "/v1/products/"+url.PathEscape(id), nil, "", nil, nil)
	if statusOf(err) == http.StatusNotFound {
		return nil
	}
	return err
}

// FindProductByExternalRef implements port.Marketplace.
func (c *Client) FindProductByExternalRef(ctx context.Context, creds port.Credentials, ref string) (*port.PlatformProduct, error) {
	const op = "platform.FindProductByExternalRef"
	if ref == "" {
		return nil, fmt.Errorf("%s: empty external ref: %w", op, port.ErrPlatformRejected)
	}
	var out wireList
	if err := c.do(ctx, op, creds, http.MethodGet, "/v1/products", url.Values{"external_ref": {ref}}, "", nil, &out); err != nil {
		return nil, err
	}
	var match []wireProduct
	for _, it := range out.Items {
		if it.ExternalRef == ref && it.ID != "" {
			match = append(match, it)
		}
	}
	if len(match) == 0 {
		return nil, nil
	}
	sort.SliceStable(match, func(i, j int) bool { return match[i].CreatedAt.Before(match[j].CreatedAt) })
	p := match[0].port()
	return &p, nil
}

// ListProducts implements port.Marketplace.
func (c *Client) ListProducts(ctx context.Context, creds port.Credentials, limit int, pageToken string) (port.ProductPage, error) {
	const op = "platform.ListProducts"
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if pageToken != "" {
		q.Set("page_token", pageToken)
	}
	var out wireList
	if err := c.do(ctx, op, creds, http.MethodGet, "/v1/products", q, "", nil, &out); err != nil {
		return port.ProductPage{}, err
	}
	page := port.ProductPage{Items: make([]port.PlatformProduct, 0, len(out.Items)), NextPageToken: out.NextPageToken}
	for _, it := range out.Items {
		page.Items = append(page.Items, it.port())
	}
	return page, nil
}

const maxResponse = 4 << 20

// do sends one request and maps the outcome. Errors are wrapped with op and never contain the
// key, the request body or an unbounded response body.
func (c *Client) do(ctx context.Context, op string, creds port.Credentials, method, path string, q url.Values, idemKey string, in, out any) (err error) {
	start := time.Now()
	status := 0
	defer func() {
		attrs := []any{slog.String("op", op), slog.String("method", method), slog.String("path", path),
			slog.Int("status", status), slog.Duration("duration", time.Since(start))}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		c.cfg.Logger.DebugContext(ctx, "platform call", attrs...)
	}()

	if creds.IsZero() {
		return fmt.Errorf("%s: no credentials: %w", op, port.ErrPlatformUnauthorized)
	}
	u := *c.base
	u.Path = c.base.Path + path
	u.RawQuery = q.Encode()

	var body io.Reader
	if in != nil {
		raw, mErr := json.Marshal(in)
		if mErr != nil {
			return fmt.Errorf("%s: encode request: %w", op, mErr)
		}
		body = bytes.NewReader(raw)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return fmt.Errorf("%s: build request: %w", op, port.ErrPlatformRejected)
	}
	req.Header.Set("Authorization", "Bearer "+creds.APIKey())
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}

	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", op, port.ErrPlatformTransient.WithCause(transportCause(err)))
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	raw, readErr := io.ReadAll(io.LimitReader(resp.Body, maxResponse+1))

	switch {
	case status >= 200 && status < 300:
		if readErr != nil {
			return fmt.Errorf("%s: read response: %w", op, port.ErrPlatformTransient.WithCause(transportCause(readErr)))
		}
		if len(raw) > maxResponse {
			return fmt.Errorf("%s: response larger than %d bytes: %w", op, maxResponse, port.ErrPlatformTransient)
		}
		if out != nil {
			if err := json.Unmarshal(raw, out); err != nil {
				return fmt.Errorf("%s: HTTP %d with an unreadable body: %w", op, status, port.ErrPlatformTransient)
			}
		}
		return nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return fmt.Errorf("%s: HTTP %d%s: %w", op, status, snippet(raw, creds.APIKey()), port.ErrPlatformUnauthorized)
	case status == http.StatusTooManyRequests:
		ra := outbound.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), c.cfg.MaxRetryAfter)
		return fmt.Errorf("%s: HTTP 429: %w", op, &port.RateLimitedError{Service: "platform", RetryAfter: ra, Sentinel: port.ErrPlatformRateLimited})
	case status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		ra := outbound.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), c.cfg.MaxRetryAfter)
		return fmt.Errorf("%s: HTTP 503%s: %w", op, snippet(raw, creds.APIKey()), port.ErrPlatformTransient.WithRetryAfter(ra))
	case status == http.StatusRequestTimeout || status >= 500:
		return fmt.Errorf("%s: HTTP %d%s: %w", op, status, snippet(raw, creds.APIKey()), port.ErrPlatformTransient)
	default:
		return fmt.Errorf("%s: %w%s: %w", op, httpStatus(status), snippet(raw, creds.APIKey()), port.ErrPlatformRejected)
	}
}

// httpStatus is the status of a request the gateway refused with a 4xx (port.ErrPlatformRejected).
type httpStatus int

func (s httpStatus) Error() string { return fmt.Sprintf("HTTP %d", int(s)) }

// statusOf returns the status of a refusal do returned, or 0. A method whose repeat meets a
// known refusal reports that outcome as its success: a repeat DELETE's 404 means "deleted".
func statusOf(err error) int {
	var s httpStatus
	if errors.As(err, &s) {
		return int(s)
	}
	return 0
}

// transportCause strips the URL that *url.Error adds (it is ours, but keep errors short and
// free of anything a misconfigured base URL might hold).
func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timeout: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}

// snippet returns " (code: message)" from a {"error": {"code", "message"}} body, or a short
// sanitized prefix of any other body, with the key masked. Bounded to ~200 bytes.
func snippet(raw []byte, apiKey string) string {
	if len(raw) == 0 {
		return ""
	}
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	text := ""
	if json.Unmarshal(raw, &e) == nil && (e.Error.Code != "" || e.Error.Message != "") {
		text = e.Error.Code
		if e.Error.Message != "" {
			text += ": " + e.Error.Message
		}
	} else {
		text = string(raw[:min(len(raw), 120)])
	}
	s := outbound.Sanitize(text, 200, apiKey)
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func bounded(s string, max int) string {
	if len(s) <= max {
		return s
	}
	return s[:max]
}

// RevokeAuthorization revokes the authorization of creds at the marketplace
// (POST /v1/authorizations/revoke). Its repeat meets 401 (the key is revoked already: the
// first call's answer was lost), which counts as done.
func (c *Client) RevokeAuthorization(ctx context.Context, creds port.Credentials) error {
	if creds.APIKey() == "" { // not a repeat: nothing to revoke with
		return fmt.Errorf("platform.RevokeAuthorization: no credentials: %w", port.ErrPlatformRejected)
	}
	err := c.do(ctx, "platform.RevokeAuthorization", creds, http.MethodPost, "/v1/authorizations/revoke", nil, "", nil, nil)
	if errors.Is(err, port.ErrPlatformUnauthorized) {
		return nil
	}
	return err
}

// AuthorizationActive reports whether the authorization of creds is still active
// (GET /v1/authorizations/current): false once revoked (401).
func (c *Client) AuthorizationActive(ctx context.Context, creds port.Credentials) (bool, error) {
	err := c.do(ctx, "platform.AuthorizationActive", creds, http.MethodGet, "/v1/authorizations/current", nil, "", nil, nil)
	if errors.Is(err, port.ErrPlatformUnauthorized) {
		return false, nil
	}
	return err == nil, err
}
