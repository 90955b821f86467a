// Package httpapi is the HTTP transport: routing, authentication, workspace membership,
// strict JSON decoding, RFC 9457 problem responses, idempotency headers, health, metrics and
// the OpenAPI document (openapi.yaml, served at /openapi.yaml and rendered at /docs by
// docs.go, kept true by a test).
//
// server.go is the router: every route is listed in routes, and declared once more in
// endpoints.go with its operationId and the errors it may answer (openapi.yaml's operationIds
// and error responses and docs/http-api.md's errors by endpoint are generated from it). Each resource has one file
// (products.go, stores.go, media.go, transfers.go, publications.go, listing_updates.go,
// syncs.go, ai_tasks.go, operations.go, auth.go, integrations.go) with its JSON shapes and handlers; handle.go holds what they share.
// Every POST/PUT that starts asynchronous work requires Idempotency-Key and answers
// {"<resource>": …, "operation": …}.
//
// Handlers decode and validate input, build a command and run it through the command bus;
// they never open transactions or talk to the database themselves. Logs carry one line per
// request with method, route pattern, status and timing — never bodies, query strings,
// credentials or tokens.
package httpapi

import (
	"context"
	_ "embed"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/tracing"
)

//go:embed openapi.yaml
var openAPIDocument []byte

// OpenAPIDocument returns the OpenAPI document as embedded; the server serves it with
// Config.PublicBaseURL as its server.
func OpenAPIDocument() []byte { return openAPIDocument }

// Config configures the HTTP layer.
type Config struct {
	// MaxBodyBytes bounds JSON request bodies (413 beyond). Default 1 MiB.
	MaxBodyBytes int64
	// AuthRatePerMinute bounds the auth requests (register, login, refresh) of one client
	// address. Default 20.
	AuthRatePerMinute int
	// LoginLimits hold back failed logins per (account, client) and slow an account's
	// guesses down (see LoginLimits for the defaults); their state is in Deps.LoginLimits.
	LoginLimits LoginLimits
	// PublicBaseURL is how clients reach the service (PUBLIC_BASE_URL): the server that
	// /openapi.yaml and /docs name. Empty: the document's own development default.
	PublicBaseURL string
	// WorkspaceRateLimit is each workspace's budget of requests (WORKSPACE_RATE_LIMIT): the
	// requests under /v1/workspaces/{workspace_id} of its members and the commands its
	// integrations send as messages draw from one bucket (Deps.WorkspaceBuckets), and one
	// beyond it is answered 429 RATE_LIMITED with Retry-After. Zero (default): no limit.
	WorkspaceRateLimit domain.RateLimit
	// StoreRateLimits are the platforms' budgets of a store's requests (STORE_RATE_LIMITS): a
	// store without its own shows its platform's as its rate_limit. Nil: none.
	StoreRateLimits map[string]domain.RateLimit
}

func (c *Config) setDefaults() {
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.AuthRatePerMinute <= 0 {
		c.AuthRatePerMinute = 20
	}
}

// IdempotencyPolicy is what the HTTP layer needs of the idempotency guard (idem.Guard): the
// value of the Idempotency-Retention header.
type IdempotencyPolicy interface {
	RetentionHeader() string
}

// ReadinessCheck reports whether a dependency is reachable.
type ReadinessCheck struct {
	Name  string
	Check func(ctx context.Context) error
}

// HashSlots bounds the requests that hash a password (auth.HashSlots). Acquire waits a
// little for a slot and returns domain.ErrServiceBusy when none frees up; the caller calls
// release once its hash is done.
type HashSlots interface {
	// Acquire may take a reserved slot: for a login from a client the account knows.
	Acquire(ctx context.Context) (release func(), err error)
	// AcquireShared never takes a reserved slot: for register and other logins.
	AcquireShared(ctx context.Context) (release func(), err error)
}

// Deps are the collaborators of the HTTP layer.
type Deps struct {
	App         *app.Application
	Tokens      port.TokenIssuer
	Idempotency IdempotencyPolicy
	Ready       []ReadinessCheck
	// HashSlots bounds register and login, which hash a password: each takes a slot before
	// its command (and its transaction) starts, so waiting holds no database connection,
	// and answers 503 SERVICE_BUSY with Retry-After when none frees up. Nil: no bound.
	HashSlots HashSlots
	// LoginLimits keeps the login limits' state, shared by every API process
	// (postgres.LoginLimits). Nil: logins are not limited (tests of other routes only).
	LoginLimits port.LoginLimitStore
	// WorkspaceBuckets keep the workspaces' budgets (Config.WorkspaceRateLimit), shared by
	// every API process (ratelimit.Redis). Nil: no limit.
	WorkspaceBuckets port.RateBuckets
	Registry         *prometheus.Registry
	Logger           *slog.Logger
	// Extra mounts routes owned by other packages (e.g. the local upload endpoint).
	Extra func(r chi.Router)
}

// Server is the HTTP API.
type Server struct {
	cfg     Config
	deps    Deps
	app     *app.Application
	log     *slog.Logger
	metrics *Metrics
	limits  *authLimits
	logins  *loginGuard
	handler http.Handler
	traced  http.Handler
	// document is the served OpenAPI document and docs its HTML rendering.
	document, docs []byte
	// commands is the command catalogue: HTTP (serve) and messages (ExecuteMessage) run
	// commands from it.
	commands *Catalogue
}

// New builds the server and its routes.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg.setDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	s := &Server{cfg: cfg, deps: deps, app: deps.App, log: deps.Logger}
	if deps.Registry != nil {
		m, err := NewMetrics(deps.Registry)
		if err != nil {
			return nil, err
		}
		s.metrics = m
	}
	s.limits = newAuthLimits(cfg.AuthRatePerMinute)
	s.logins = newLoginGuard(cfg.LoginLimits, deps.LoginLimits, deps.Logger)
	var err error
	if s.document, err = servedDocument(openAPIDocument, cfg.PublicBaseURL); err != nil {
		return nil, err
	}
	if s.docs, err = renderDocs(s.document); err != nil {
		return nil, err
	}
	if s.commands, err = s.catalogue(flows.All()); err != nil {
		return nil, err
	}
	s.handler = s.routes()
	s.traced = tracing.Handler(s.handler, "http")
	return s, nil
}

// ServeHTTP implements http.Handler: every request gets a server span (continuing the
// caller's traceparent) around the router.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.traced.ServeHTTP(w, r) }

// Catalogue returns the command catalogue. A command added to it (before the command stream
// runs) runs from messages; its HTTP endpoint, if any, is not served.
func (s *Server) Catalogue() *Catalogue { return s.commands }

// Router returns the chi router, for route listings (the OpenAPI test walks it).
func (s *Server) Router() chi.Routes { return s.handler.(chi.Routes) }

func (s *Server) routes() http.Handler {
	r := chi.NewRouter()
	r.Use(withRequestID, withEventContext, s.observe)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, Problem{Status: http.StatusNotFound, Code: domain.ErrNotFound.Code, Detail: "no such route"})
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, Problem{Status: http.StatusMethodNotAllowed, Code: domain.ErrMethodNotAllowed.Code, Detail: "method not allowed on this route"})
	})

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	if s.deps.Registry != nil {
		r.Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.deps.Registry, promhttp.HandlerOpts{}))
	}
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/docs", http.StatusFound) })
	r.Get("/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		_, _ = w.Write(s.document)
	})
	r.Get("/docs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
		_, _ = w.Write(s.docs)
	})

	r.Route("/v1", func(r chi.Router) {
		r.Route("/auth", func(r chi.Router) {
			r.Use(s.limits.perAddress)
			r.Post("/register", s.register)
			r.Post("/login", s.login)
			r.Post("/refresh", s.refresh)
		})
		r.Group(func(r chi.Router) {
			r.Use(s.authenticate)
			r.Get("/workspaces", s.listWorkspaces)
			r.Route("/workspaces/{workspace_id}", func(r chi.Router) {
				r.Use(s.requireMember)
				r.Post("/products", s.createProduct)
				r.Get("/products", s.listProducts)
				r.Get("/products/{product_id}", s.getProduct)
				r.Put("/products/{product_id}/draft", s.saveProductDraft)
				r.Get("/products/{product_id}/publications", s.listProductPublications)

				r.Get("/operations", s.listOperations)
				r.Get("/operations/{operation_id}", s.getOperation)
				r.Post("/operations/{operation_id}/cancel", s.cancelOperation)

				r.Get("/stores", s.listStores)
				r.Get("/stores/{store_id}", s.getStore)
				r.Put("/stores/{store_id}/rate-limit", s.setStoreRateLimit)
				r.Delete("/stores/{store_id}/rate-limit", s.deleteStoreRateLimit)
				r.Get("/stores/{store_id}/verifications", s.listStoreVerifications)
				r.Get("/stores/{store_id}/product-syncs", s.listStoreSyncs)

				r.Get("/product-syncs", s.listSyncs)
				r.Get("/product-syncs/{sync_id}", s.getSync)

				r.Post("/media", s.createMedia)
				r.Get("/media", s.listMedia)
				r.Get("/media/{media_id}", s.getMedia)

				r.Get("/material-transfers", s.listTransfers)
				r.Get("/material-transfers/{transfer_id}", s.getTransfer)

				r.Get("/publications", s.listPublications)
				r.Get("/publications/{publication_id}", s.getPublication)
				r.Post("/publications/{publication_id}/updates", s.updateListing)

				r.Get("/ai-tasks", s.listAITasks)
				r.Get("/ai-tasks/{ai_task_id}", s.getAITask)

				r.Post("/integrations", s.createIntegration)
				r.Get("/integrations", s.listIntegrations)
				r.Delete("/integrations/{integration_id}", s.revokeIntegration)

				s.taskRoutes(r)
				// The endpoints of the catalogue's commands (catalogue.go).
				for _, c := range s.commands.endpoints() {
					r.Method(c.Method, c.Path, s.serve(c))
				}
			})
		})
		if s.deps.Extra != nil {
			s.deps.Extra(r)
		}
	})
	return r
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	checks := map[string]string{}
	status := http.StatusOK
	for _, c := range s.deps.Ready {
		if err := c.Check(ctx); err != nil {
			s.log.WarnContext(ctx, "readiness check failed", "check", c.Name, "err", err)
			checks[c.Name] = "unavailable"
			status = http.StatusServiceUnavailable
		} else {
			checks[c.Name] = "ok"
		}
	}
	state := "ok"
	if status != http.StatusOK {
		state = "unavailable"
	}
	writeJSON(w, status, map[string]any{"status": state, "checks": checks})
}
