package marketplace

import (
	"bytes"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/ratelimit"
	"github.com/listingkit/listing/infra/sandbox"
)

// Endpoint names, used by Calls, Stats and Fault.Endpoint.
const (
	EndpointVerify        = "POST /v1/stores/verify"
	EndpointCreateProduct = "POST /v1/products"
	EndpointUpdateProduct = "PUT /v1/products/{id}"
	EndpointDeleteProduct = "DELETE /v1/products/{id}"
	EndpointFindProduct   = "GET /v1/products?external_ref"
	EndpointListProducts  = "GET /v1/products"
	// EndpointRevoke revokes the bearer key (200 {"revoked": true}); any later call with it,
	// this one included, is 401. EndpointCurrent answers 200 {"active": true} until then.
	EndpointRevoke  = "POST /v1/authorizations/revoke"
	EndpointCurrent = "GET /v1/authorizations/current"
)

// Config configures New.
type Config struct {
	// AcceptKey reports whether an api key is known to the sandbox. Default: keys that start
	// with "sk_test_".
	AcceptKey func(apiKey string) bool
	// InvalidKeyPrefix marks accepted keys whose credentials are invalid: verify answers
	// valid:false and other calls 401. Default "sk_test_invalid".
	InvalidKeyPrefix string
	// IgnoreIdempotencyKey starts the sandbox ignoring Idempotency-Key. Default false.
	IgnoreIdempotencyKey bool
	// DefaultPageSize of GET /v1/products without limit. Default 50.
	DefaultPageSize int
	// MaxPageSize caps limit. Default 100.
	MaxPageSize int
	// Logger gets one debug line per call (endpoint, status, duration). Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Rate limits the calls of each api key (a shop's credentials): beyond it a call is
	// answered 429 rate_limited with Retry-After and does nothing. Zero (default): no limit.
	Rate domain.RateLimit
}

func (c *Config) setDefaults() {
	if c.AcceptKey == nil {
		c.AcceptKey = func(k string) bool { return strings.HasPrefix(k, "sk_test_") }
	}
	if c.InvalidKeyPrefix == "" {
		c.InvalidKeyPrefix = "sk_test_invalid"
	}
	if c.DefaultPageSize == 0 {
		c.DefaultPageSize = 50
	}
	if c.MaxPageSize == 0 {
		c.MaxPageSize = 100
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
}

// Validate reports the first invalid field without changing c.
func (c Config) Validate() error {
	if err := c.Rate.Validate(); err != nil {
		return fmt.Errorf("marketplace: Rate: %w", err)
	}
	if c.DefaultPageSize < 0 || c.MaxPageSize < 0 || (c.MaxPageSize > 0 && c.DefaultPageSize > c.MaxPageSize) {
		return fmt.Errorf("marketplace: page sizes must be positive with DefaultPageSize <= MaxPageSize")
	}
	return nil
}

// Product is a product as the sandbox stores and returns it.
type Product struct {
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

type savedResponse struct {
	fingerprint [32]byte
	status      int
	body        Product
}

type shop struct {
	products []*Product
	idem     map[string]savedResponse
}

// Stats is a snapshot of the sandbox's counters (GET /_sandbox/stats).
type Stats struct {
	// Calls counts every request per endpoint, including failed and faulted ones.
	Calls map[string]int `json:"calls"`
	// ProductsByExternalRef counts products created per external_ref (over all shops).
	ProductsByExternalRef map[string]int `json:"products_by_external_ref"`
	// ProductsCreated counts every product created.
	ProductsCreated int `json:"products_created"`
	// ProductsUpdated counts every update applied (PUT /v1/products/{id} not answered from a
	// saved response).
	ProductsUpdated int `json:"products_updated"`
	// ProductsDeleted counts every product deleted (a DELETE of an unknown id deletes none).
	ProductsDeleted int `json:"products_deleted"`
	// IdempotentReplays counts POSTs and PUTs answered from a saved Idempotency-Key response.
	IdempotentReplays int `json:"idempotent_replays"`
	// RateLimited counts the calls answered 429 because their key was over Config.Rate.
	RateLimited          int  `json:"rate_limited"`
	IgnoreIdempotencyKey bool `json:"ignore_idempotency_key"`
}

// Sandbox is the in-memory marketplace gateway. Safe for concurrent use.
type Sandbox struct {
	cfg    Config
	faults sandbox.Faults

	mu       sync.Mutex
	ignore   bool
	shops    map[string]*shop
	nextID   int
	calls    map[string]int
	byRef    map[string]int
	created  int
	updated  int
	deleted  int
	replays  int
	limited  int
	adminMux *http.ServeMux
	keys     *ratelimit.Local // the buckets of Config.Rate, by api key
	revoked  map[string]bool  // api keys revoked (EndpointRevoke)
}

// New returns a sandbox.
func New(cfg Config) (*Sandbox, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("marketplace.New: %w", err)
	}
	s := &Sandbox{cfg: cfg, keys: &ratelimit.Local{Now: cfg.Now}, revoked: map[string]bool{}}
	s.resetLocked()
	s.ignore = cfg.IgnoreIdempotencyKey
	return s, nil
}

func (s *Sandbox) resetLocked() {
	s.shops = map[string]*shop{}
	s.nextID = 0
	s.calls = map[string]int{}
	s.byRef = map[string]int{}
	s.created = 0
	s.updated = 0
	s.deleted = 0
	s.replays = 0
	s.limited = 0
}

// SetIgnoreIdempotencyKey switches whether POST /v1/products and PUT /v1/products/{id}
// ignore Idempotency-Key.
func (s *Sandbox) SetIgnoreIdempotencyKey(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignore = on
}

// InjectFault queues a fault (see sandbox.Fault).
func (s *Sandbox) InjectFault(f sandbox.Fault) { s.faults.Inject(f) }

// SetLatency delays every call by d.
func (s *Sandbox) SetLatency(d time.Duration) { s.faults.SetLatency(d) }

// Reset forgets products, idempotency keys, counters, faults and latency; the
// IgnoreIdempotencyKey switch returns to its configured value.
func (s *Sandbox) Reset() {
	s.faults.Reset()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked()
	s.ignore = s.cfg.IgnoreIdempotencyKey
}

// Calls returns how many requests endpoint received.
func (s *Sandbox) Calls(endpoint string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[endpoint]
}

// ProductsWithRef returns how many products were created with external_ref ref.
func (s *Sandbox) ProductsWithRef(ref string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byRef[ref]
}

// Stats returns a snapshot of the counters.
func (s *Sandbox) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{
		Calls:                 make(map[string]int, len(s.calls)),
		ProductsByExternalRef: make(map[string]int, len(s.byRef)),
		ProductsCreated:       s.created,
		ProductsUpdated:       s.updated,
		ProductsDeleted:       s.deleted,
		IdempotentReplays:     s.replays,
		RateLimited:           s.limited,
		IgnoreIdempotencyKey:  s.ignore,
	}
	for k, v := range s.calls {
		st.Calls[k] = v
	}
	for k, v := range s.byRef {
		st.ProductsByExternalRef[k] = v
	}
	return st
}

// Product returns the current state of the product id of apiKey's shop, and whether it
// exists: what a listing holds after its updates.
func (s *Sandbox) Product(apiKey, id string) (Product, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if p := s.shopLocked(apiKey).byID(id); p != nil {
		c := *p
		c.Images = append([]string{}, p.Images...)
		return c, true
	}
	return Product{}, false
}

// Seed creates n products for apiKey with external refs "seed-<i>" and returns their ids.
func (s *Sandbox) Seed(apiKey string, n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, n)
	for i := 0; i < n; i++ {
		p := s.createLocked(apiKey, productBody{
			ExternalRef: fmt.Sprintf("seed-%d", s.nextID+1),
			Title:       fmt.Sprintf("Seeded product %d", s.nextID+1),
			Price:       "9.99",
			Currency:    "EUR",
		})
		ids = append(ids, p.ID)
	}
	return ids
}

type apiError struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func errBody(code, msg string) apiError {
	var e apiError
	e.Error.Code, e.Error.Message = code, msg
	return e
}

type response struct {
	status int
	header http.Header
	body   any
}

// ServeHTTP implements the protocol and the admin endpoints.
func (s *Sandbox) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := s.cfg.Now()
	if strings.HasPrefix(r.URL.Path, "/_sandbox/") {
		s.serveAdmin(w, r)
		return
	}
	endpoint := endpointOf(r)
	if endpoint == "" {
		sandbox.WriteJSON(w, http.StatusNotFound, nil, errBody("not_found", "no such endpoint"))
		return
	}
	s.mu.Lock()
	s.calls[endpoint]++
	s.mu.Unlock()

	resp := s.handle(r, endpoint)
	sandbox.WriteJSON(w, resp.status, resp.header, resp.body)
	s.cfg.Logger.Debug("marketplace sandbox call",
		slog.String("endpoint", endpoint), slog.Int("status", resp.status),
		slog.Duration("duration", s.cfg.Now().Sub(start)))
}

func endpointOf(r *http.Request) string {
	switch {
	case r.URL.Path == "/v1/stores/verify" && r.Method == http.MethodPost:
		return EndpointVerify
	case r.URL.Path == "/v1/products" && r.Method == http.MethodPost:
		return EndpointCreateProduct
	case strings.HasPrefix(r.URL.Path, "/v1/products/") && r.Method == http.MethodPut:
		return EndpointUpdateProduct
	case strings.HasPrefix(r.URL.Path, "/v1/products/") && r.Method == http.MethodDelete:
		return EndpointDeleteProduct
	case r.URL.Path == "/v1/authorizations/revoke" && r.Method == http.MethodPost:
		return EndpointRevoke
	case r.URL.Path == "/v1/authorizations/current" && r.Method == http.MethodGet:
		return EndpointCurrent
	case r.URL.Path == "/v1/products" && r.Method == http.MethodGet:
		if r.URL.Query().Has("external_ref") {
			return EndpointFindProduct
		}
		return EndpointListProducts
	}
	return ""
}

func (s *Sandbox) handle(r *http.Request, endpoint string) response {
	// Read the body before any latency: the server notices a client that gave up only once
	// the body is consumed, and the sleep should end with it.
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", "the body could not be read")}
	}
	r.Body = io.NopCloser(bytes.NewReader(raw))
	s.faults.Sleep(r.Context())
	fault, faulted := s.faults.Next(endpoint)
	if faulted && !fault.AfterEffect {
		return faultResponse(fault)
	}
	key := sandbox.BearerToken(r)
	if key == "" || !s.cfg.AcceptKey(key) {
		return response{status: http.StatusUnauthorized, body: errBody("unauthorized", "missing or unknown api key")}
	}
	if wait, _ := s.keys.Take(r.Context(), key, s.cfg.Rate, 1); wait > 0 {
		s.mu.Lock()
		s.limited++
		s.mu.Unlock()
		h := http.Header{}
		h.Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
		return response{status: http.StatusTooManyRequests, header: h, body: errBody("rate_limited", "too many requests for this api key")}
	}
	invalid := strings.HasPrefix(key, s.cfg.InvalidKeyPrefix)
	s.mu.Lock()
	revoked := s.revoked[key]
	if endpoint == EndpointRevoke && !revoked {
		s.revoked[key] = true
	}
	s.mu.Unlock()
	var resp response
	switch {
	case revoked:
		return response{status: http.StatusUnauthorized, body: errBody("unauthorized", "the api key was revoked")}
	case endpoint == EndpointRevoke:
		resp = response{status: http.StatusOK, body: map[string]any{"revoked": true}}
	case endpoint == EndpointCurrent:
		resp = response{status: http.StatusOK, body: map[string]any{"active": true}}
	}
	switch endpoint {
	case EndpointRevoke, EndpointCurrent:
	case EndpointVerify:
		resp = s.verify(r, invalid)
	default:
		if invalid {
			return response{status: http.StatusUnauthorized, body: errBody("unauthorized", "the api key was revoked")}
		}
		switch endpoint {
		case EndpointCreateProduct:
			resp = s.create(r, key)
		case EndpointUpdateProduct:
			resp = s.update(r, key)
		case EndpointDeleteProduct:
			resp = s.remove(r, key)
		case EndpointFindProduct:
			resp = s.find(r, key)
		case EndpointListProducts:
			resp = s.list(r, key)
		}
	}
	if faulted {
		return faultResponse(fault)
	}
	return resp
}

func faultResponse(f sandbox.Fault) response {
	code := "internal_error"
	if f.Status == http.StatusTooManyRequests {
		code = "rate_limited"
	}
	return response{status: f.Status, header: sandbox.FaultHeaders(f), body: errBody(code, "injected fault")}
}

const maxBody = 1 << 20

func readJSON(r *http.Request, v any) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, err
	}
	if len(raw) > maxBody {
		return nil, fmt.Errorf("body too large")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("malformed JSON body")
	}
	return raw, nil
}

func (s *Sandbox) verify(r *http.Request, invalid bool) response {
	var in struct {
		Platform string `json:"platform"`
		ShopID   string `json:"shop_id"`
	}
	if _, err := readJSON(r, &in); err != nil {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", err.Error())}
	}
	if in.Platform == "" || in.ShopID == "" {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", "platform and shop_id are required")}
	}
	out := struct {
		Valid    bool   `json:"valid"`
		ShopName string `json:"shop_name"`
		Reason   string `json:"reason"`
	}{Valid: true, ShopName: "Sandbox shop " + in.ShopID}
	if invalid {
		out = struct {
			Valid    bool   `json:"valid"`
			ShopName string `json:"shop_name"`
			Reason   string `json:"reason"`
		}{Valid: false, Reason: "the api key is not authorized for this shop"}
	}
	return response{status: http.StatusOK, body: out}
}

type productBody struct {
	ExternalRef string   `json:"external_ref"`
	Title       string   `json:"title"`
	Description string   `json:"description"`
	Price       string   `json:"price"`
	Currency    string   `json:"currency"`
	Images      []string `json:"images"`
}

var (
	pricePattern    = regexp.MustCompile(`^[0-9]{1,12}(\.[0-9]{1,4})?$`)
	currencyPattern = regexp.MustCompile(`^[A-Z]{3}$`)
)

func (b productBody) validate() string {
	switch {
	case b.ExternalRef == "" || len(b.ExternalRef) > 200:
		return "external_ref is required (at most 200 bytes)"
	case b.Title == "" || len(b.Title) > 500:
		return "title is required (at most 500 bytes)"
	case len(b.Description) > 50000:
		return "description is too long"
	case !pricePattern.MatchString(b.Price):
		return "price must be a decimal string"
	case !currencyPattern.MatchString(b.Currency):
		return "currency must be an ISO 4217 code"
	case len(b.Images) > 20:
		return "at most 20 images"
	}
	for _, img := range b.Images {
		u, err := url.Parse(img)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return "images must be http(s) URLs"
		}
	}
	return ""
}

func (s *Sandbox) create(r *http.Request, key string) response {
	var in productBody
	raw, err := readJSON(r, &in)
	if err != nil {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", err.Error())}
	}
	if msg := in.validate(); msg != "" {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", msg)}
	}
	idemKey := r.Header.Get("Idempotency-Key")
	fp := fingerprint(raw)

	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shopLocked(key)
	if idemKey != "" && !s.ignore {
		if saved, ok := sh.idem[idemKey]; ok {
			if saved.fingerprint != fp {
				return response{status: http.StatusConflict, body: errBody("idempotency_key_reused", "the Idempotency-Key was used with another request")}
			}
			s.replays++
			return response{status: saved.status, header: http.Header{"Idempotent-Replayed": {"true"}}, body: saved.body}
		}
	}
	p := s.createLocked(key, in)
	if idemKey != "" && !s.ignore {
		sh.idem[idemKey] = savedResponse{fingerprint: fp, status: http.StatusCreated, body: *p}
	}
	return response{status: http.StatusCreated, body: *p}
}

// update replaces a product's content (PUT /v1/products/{id}). Its Idempotency-Key is
// saved per shop apart from the creates' keys, with the product id in the fingerprint: the
// same key and request answer the saved response without applying anything; the same key
// with another body or product, 409.
func (s *Sandbox) update(r *http.Request, key string) response {
	id := strings.TrimPrefix(r.URL.Path, "/v1/products/")
	var in productBody
	raw, err := readJSON(r, &in)
	if err != nil {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", err.Error())}
	}
	if msg := in.validate(); msg != "" {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", msg)}
	}
	idemKey := r.Header.Get("Idempotency-Key")
	fp := fingerprint(append([]byte(id+"\n"), raw...))

	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shopLocked(key)
	saveAs := "PUT " + idemKey
	if idemKey != "" && !s.ignore {
		if saved, ok := sh.idem[saveAs]; ok {
			if saved.fingerprint != fp {
				return response{status: http.StatusConflict, body: errBody("idempotency_key_reused", "the Idempotency-Key was used with another request")}
			}
			s.replays++
			return response{status: saved.status, header: http.Header{"Idempotent-Replayed": {"true"}}, body: saved.body}
		}
	}
	p := sh.byID(id)
	if p == nil {
		return response{status: http.StatusNotFound, body: errBody("not_found", "no such product")}
	}
	if p.ExternalRef != in.ExternalRef {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", "external_ref does not match the product")}
	}
	p.Title, p.Description, p.Price, p.Currency = in.Title, in.Description, in.Price, in.Currency
	p.Images = append([]string{}, in.Images...)
	p.UpdatedAt = s.cfg.Now().UTC()
	s.updated++
	if idemKey != "" && !s.ignore {
		sh.idem[saveAs] = savedResponse{fingerprint: fp, status: http.StatusOK, body: *p}
	}
	return response{status: http.StatusOK, body: *p}
}

// remove deletes a product (DELETE /v1/products/{id}): 200 {"id", "deleted": true}, or 404
// when the shop has no such product (a repeat delete).
func (s *Sandbox) remove(r *http.Request, key string) response {
	id := strings.TrimPrefix(r.URL.Path, "/v1/products/")
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shopLocked(key)
	i := slices.IndexFunc(sh.products, func(p *Product) bool { return p.ID == id })
	if i < 0 {
		return response{status: http.StatusNotFound, body: errBody("not_found", "no such product")}
	}
	sh.products = slices.Delete(sh.products, i, i+1)
	s.deleted++
	return response{status: http.StatusOK, body: map[string]any{"id": id, "deleted": true}}
}

func (sh *shop) byID(id string) *Product {
	for _, p := range sh.products {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// fingerprint hashes a JSON body by meaning (key order and spacing ignored).
func fingerprint(raw []byte) [32]byte {
	var v any
	if err := json.Unmarshal(raw, &v); err == nil {
		if canon, err := json.Marshal(v); err == nil {
			raw = canon
		}
	}
	return sha256.Sum256(raw)
}

func (s *Sandbox) shopLocked(key string) *shop {
	sh := s.shops[key]
	if sh == nil {
		sh = &shop{idem: map[string]savedResponse{}}
		s.shops[key] = sh
	}
	return sh
}

func (s *Sandbox) createLocked(key string, in productBody) *Product {
	s.nextID++
	now := s.cfg.Now().UTC()
	images := append([]string{}, in.Images...)
	p := &Product{
		ID:          fmt.Sprintf("prod_%06d", s.nextID),
		ExternalRef: in.ExternalRef,
		Title:       in.Title,
		Description: in.Description,
		Price:       in.Price,
		Currency:    in.Currency,
		Images:      images,
		CreatedAt:   now,
		UpdatedAt:   now,
	}
	sh := s.shopLocked(key)
	sh.products = append(sh.products, p)
	s.byRef[in.ExternalRef]++
	s.created++
	return p
}

type listBody struct {
	Items         []Product `json:"items"`
	NextPageToken string    `json:"next_page_token,omitempty"`
}

func (s *Sandbox) find(r *http.Request, key string) response {
	ref := r.URL.Query().Get("external_ref")
	if ref == "" {
		return response{status: http.StatusBadRequest, body: errBody("invalid_request", "external_ref is empty")}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := listBody{Items: []Product{}}
	for _, p := range s.shopLocked(key).products {
		if p.ExternalRef == ref {
			out.Items = append(out.Items, *p)
		}
	}
	return response{status: http.StatusOK, body: out}
}

func (s *Sandbox) list(r *http.Request, key string) response {
	q := r.URL.Query()
	limit := s.cfg.DefaultPageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return response{status: http.StatusBadRequest, body: errBody("invalid_request", "limit must be a positive integer")}
		}
		limit = min(n, s.cfg.MaxPageSize)
	}
	offset := 0
	if t := q.Get("page_token"); t != "" {
		n, ok := decodeToken(t)
		if !ok {
			return response{status: http.StatusBadRequest, body: errBody("invalid_request", "page_token is not valid")}
		}
		offset = n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	all := s.shopLocked(key).products
	out := listBody{Items: []Product{}}
	end := min(offset+limit, len(all))
	for i := offset; i < end; i++ {
		out.Items = append(out.Items, *all[i])
	}
	if end < len(all) {
		out.NextPageToken = encodeToken(end)
	}
	return response{status: http.StatusOK, body: out}
}

func encodeToken(offset int) string {
	return base64.RawURLEncoding.EncodeToString([]byte("o:" + strconv.Itoa(offset)))
}

func decodeToken(t string) (int, bool) {
	b, err := base64.RawURLEncoding.DecodeString(t)
	if err != nil || !bytes.HasPrefix(b, []byte("o:")) {
		return 0, false
	}
	n, err := strconv.Atoi(string(b[2:]))
	return n, err == nil && n >= 0
}

// FilesPath is where the sandbox serves its sample files (GET FilesPath+"mug.png"): material
// to transfer in development without the Internet.
const FilesPath = "/_sandbox/files/"

//go:embed mug.png
var sampleImage []byte

func (s *Sandbox) serveAdmin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == FilesPath+"mug.png" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		w.Header().Set("Content-Type", "image/png")
		w.Header().Set("Content-Length", strconv.Itoa(len(sampleImage)))
		if r.Method == http.MethodGet {
			_, _ = w.Write(sampleImage)
		}
	case r.URL.Path == "/_sandbox/stats" && r.Method == http.MethodGet:
		sandbox.WriteJSON(w, http.StatusOK, nil, s.Stats())
	case r.URL.Path == "/_sandbox/settings" && r.Method == http.MethodPost:
		var in struct {
			IgnoreIdempotencyKey *bool `json:"ignore_idempotency_key"`
			LatencyMS            *int  `json:"latency_ms"`
		}
		if _, err := readJSON(r, &in); err != nil {
			sandbox.WriteJSON(w, http.StatusBadRequest, nil, errBody("invalid_request", err.Error()))
			return
		}
		if in.IgnoreIdempotencyKey != nil {
			s.SetIgnoreIdempotencyKey(*in.IgnoreIdempotencyKey)
		}
		if in.LatencyMS != nil {
			s.SetLatency(time.Duration(*in.LatencyMS) * time.Millisecond)
		}
		sandbox.WriteJSON(w, http.StatusOK, nil, s.Stats())
	case r.URL.Path == "/_sandbox/faults" && r.Method == http.MethodPost:
		var f sandbox.Fault
		if _, err := readJSON(r, &f); err != nil {
			sandbox.WriteJSON(w, http.StatusBadRequest, nil, errBody("invalid_request", err.Error()))
			return
		}
		s.InjectFault(f)
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_sandbox/seed" && r.Method == http.MethodPost:
		var in struct {
			APIKey string `json:"api_key"`
			Count  int    `json:"count"`
		}
		if _, err := readJSON(r, &in); err != nil || in.APIKey == "" || in.Count < 1 || in.Count > 10000 {
			sandbox.WriteJSON(w, http.StatusBadRequest, nil, errBody("invalid_request", "want {api_key, count 1..10000}"))
			return
		}
		sandbox.WriteJSON(w, http.StatusOK, nil, map[string]any{"ids": s.Seed(in.APIKey, in.Count)})
	case r.URL.Path == "/_sandbox/reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	default:
		sandbox.WriteJSON(w, http.StatusNotFound, nil, errBody("not_found", "no such admin endpoint"))
	}
}
