package console

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/ratelimit"
)

//go:embed templates/*.html static/*
var assets embed.FS

// maxFormBytes bounds a POSTed form.
const maxFormBytes = 64 << 10

// Config configures a Server. Fields are read once, by New.
type Config struct {
	// Operators maps operator names to their secrets (config.ConsoleOperators). Empty:
	// development mode, loopback clients only, as DevOperator; New refuses that when
	// Production is set.
	Operators  map[string]string
	Production bool
	// Pool connects as listing_operator (OPERATOR_DATABASE_URL). Required. The caller closes
	// it after the Server is done.
	Pool *pgxpool.Pool
	// Queues names the BullMQ queues the queues page shows, in that order; BullMQ is where
	// they live (only Client and Prefix are used). A nil BullMQ.Client shows no queue (e.g.
	// QUEUE_TRANSPORT=memory: the jobs live in the process that runs them).
	Queues []string
	BullMQ bullmq.Config
	// Flows are the flows the failures and workspaces pages name (a flow filter, a task
	// table's flow). Empty: task tables are shown by their names and the failures page offers
	// no flow filter.
	Flows []Flow
	// RateWaits is the workers' log of the jobs that waited for their store's rate limit
	// (ratelimit.WaitLog, in the queues' Redis): the overview shows it per platform. Zero
	// (no Client): not shown.
	RateWaits ratelimit.WaitLog
	// StoreRateLimits are the platforms' budgets of a store's requests (STORE_RATE_LIMITS):
	// the workspace page tells from them, or from a store's own, when a store's backlog is
	// expected to end.
	StoreRateLimits map[string]domain.RateLimit
	// Platforms are the platforms the overview's rate-limit waits list (each even at 0);
	// those the log names beyond them are listed too.
	Platforms []string
	// SessionTTL is how long a browser session lasts (CONSOLE_SESSION_TTL). Default 8h.
	// Sessions live in console_sessions: shared by every console on the database, kept
	// across restarts, ended everywhere by sign-out.
	SessionTTL time.Duration
	// SigninFailures is how many wrong secrets (sign-in form or Bearer) one client address
	// (an IPv6 client: its /64) may send within SigninWindow; its next attempt, right or
	// wrong, is answered 429 with Retry-After until the oldest failure leaves the window
	// (CONSOLE_SIGNIN_FAILURES). Defaults 10 and 15m.
	SigninFailures int
	SigninWindow   time.Duration
	// Logger receives one line per action and per refused sign-in. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Flow is one flow as the console names it: its name, queue, task table, operation type and
// request event type (what the overview reads of the log).
type Flow struct {
	Name, Queue, Table, Operation, RequestEvent string
}

// Server is the operator console. Safe for concurrent use.
type Server struct {
	cfg      Config
	sessions sessionStore
	limiter  signinLimiter
	log      *slog.Logger
	now      func() time.Time
	data     reader
	ops      *outbox.Ops
	pages    map[string]*template.Template
	handler  http.Handler
}

// New returns the console for cfg. It refuses a Config without a Pool, and production without
// operators.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil {
		return nil, errors.New("console.New: Config.Pool (listing_operator) is required")
	}
	if cfg.Production && len(cfg.Operators) == 0 {
		return nil, errors.New("console.New: operators (CONSOLE_TOKENS) are required in production")
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = 8 * time.Hour
	}
	if cfg.SigninFailures <= 0 {
		cfg.SigninFailures = 10
	}
	if cfg.SigninWindow <= 0 {
		cfg.SigninWindow = 15 * time.Minute
	}
	s := &Server{cfg: cfg, log: cfg.Logger, now: cfg.Now, data: reader{pool: cfg.Pool}, ops: outbox.NewOps(cfg.Pool)}
	s.sessions, s.limiter = sessionStore{s}, signinLimiter{s}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.now == nil {
		s.now = time.Now
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, fmt.Errorf("console.New: %w", err)
	}
	s.handler = s.routes()
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.handler.ServeHTTP(w, r) }

// dev reports whether the console runs without operators (development, loopback only).
func (s *Server) dev() bool { return len(s.cfg.Operators) == 0 }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /signin", s.signinForm)
	mux.HandleFunc("POST /signin", s.signin)

	auth := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.requireOperator(h)) }
	auth("POST /signout", s.signout)
	auth("GET /{$}", s.index)
	auth("GET /outbox", s.outboxPage)
	auth("GET /outbox/event", s.eventPage)
	auth("POST /outbox/redrive", s.outboxAction)
	auth("POST /outbox/purge", s.outboxAction)
	auth("GET /queues", s.queuesPage)
	auth("POST /queues/retry", s.queueAction)
	auth("POST /queues/remove", s.queueAction)
	auth("GET /operations", s.operationsPage)
	auth("GET /failures", s.failuresPage)
	auth("GET /workspaces", s.workspacesPage)
	auth("GET /workspaces/{id}", s.workspacePage)

	return securityHeaders(http.NewCrossOriginProtection().Handler(s.loopbackOnly(mux)))
}

// securityHeaders forbids scripts, framing, caching and referrers on every response.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// page is what every template receives.
type page struct {
	Title    string
	Operator string
	CSRF     string
	// Notice and Error are one-line messages above the content.
	Notice, Error string
	Data          any
}

var pageNames = []string{"signin", "index", "outbox", "event", "queues", "operations", "failures", "workspaces", "workspace"}

func parsePages() (map[string]*template.Template, error) {
	funcs := template.FuncMap{
		"ts": func(v any) string { // a time.Time, or a *time.Time that may be nil
			var t time.Time
			switch x := v.(type) {
			case time.Time:
				t = x
			case *time.Time:
				if x != nil {
					t = *x
				}
			}
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"dur": func(d time.Duration) string {
			if d <= 0 {
				return "—"
			}
			return d.Round(time.Second).String()
		},
	}
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, err
		}
		out[name] = t
	}
	return out, nil
}

// render writes page name with status; a template error becomes a 500 before anything is
// written.
func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	id := identityOf(r)
	p.Operator, p.CSRF = id.Operator, s.csrfToken(id.Session)
	var buf bytes.Buffer
	if err := s.pages[name].Execute(&buf, p); err != nil {
		s.log.Error("console: render", "page", name, "err", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// knownQueue reports whether q is one of the configured queues.
func (s *Server) knownQueue(q string) bool { return slices.Contains(s.cfg.Queues, q) }
