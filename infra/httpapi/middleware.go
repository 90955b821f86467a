package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/tracing"
)

type ctxKey int

const (
	keyRequestID ctxKey = iota
	keyUser
	keyWorkspace
	keyLogger
)

// loggerFrom returns the server's logger carried by the request context (see observe).
func loggerFrom(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(keyLogger).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}

func requestID(ctx context.Context) string {
	id, _ := ctx.Value(keyRequestID).(string)
	return id
}

// userID returns the authenticated user (set by authenticate).
func userID(ctx context.Context) uuid.UUID {
	id, _ := ctx.Value(keyUser).(uuid.UUID)
	return id
}

// workspaceID returns the workspace of the path, once membership was checked.
func workspaceID(ctx context.Context) uuid.UUID {
	id, _ := ctx.Value(keyWorkspace).(uuid.UUID)
	return id
}

var requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// withRequestID takes a well-formed X-Request-Id from the client or makes one, and echoes it.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !requestIDRe.MatchString(id) {
			b := make([]byte, 12)
			_, _ = rand.Read(b)
			id = hex.EncodeToString(b)
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyRequestID, id)))
	})
}

// withEventContext makes every outbox event the request publishes carry the request id as
// its correlation id and the request's trace context, which the job's envelope then carries
// to the worker.
func withEventContext(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := outbox.WithCorrelationID(r.Context(), requestID(r.Context()))
		traceparent, tracestate := tracing.Inject(ctx)
		ctx = outbox.WithTraceContext(ctx, traceparent, tracestate)
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	n, err := s.ResponseWriter.Write(b)
	s.bytes += n
	return n, err
}

// Metrics are the HTTP layer's Prometheus collectors.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics registers the HTTP collectors on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "listing_http_requests_total", Help: "HTTP requests by route pattern and status.",
		}, []string{"method", "route", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "listing_http_request_duration_seconds", Help: "HTTP request latency by route pattern.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
		}, []string{"method", "route"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// observe logs one line per request (never bodies, query strings or headers) and records
// metrics, and turns a panic into a 500 problem.
func (s *Server) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.ErrorContext(r.Context(), "panic", "request_id", requestID(r.Context()), "panic", p)
				if rec.status == 0 {
					writeProblem(rec, r, Problem{Status: 500, Code: domain.ErrInternal.Code, Detail: "the request failed; quote the request id when reporting it"})
				}
			}
			route := chi.RouteContext(r.Context()).RoutePattern()
			if route == "" {
				route = "unmatched"
			}
			status := rec.status
			if status == 0 {
				status = http.StatusOK
			}
			elapsed := time.Since(start)
			if s.metrics != nil {
				s.metrics.requests.WithLabelValues(r.Method, route, strconv.Itoa(status)).Inc()
				s.metrics.duration.WithLabelValues(r.Method, route).Observe(elapsed.Seconds())
			}
			if route == "/healthz" || route == "/readyz" || route == "/metrics" {
				return
			}
			attrs := []any{"request_id", requestID(r.Context()), "method", r.Method, "route", route,
				"status", status, "duration", elapsed, "bytes", rec.bytes}
			if u := userID(r.Context()); u != uuid.Nil {
				attrs = append(attrs, "user_id", u.String())
			}
			if rec.Header().Get("Idempotent-Replayed") != "" {
				attrs = append(attrs, "replayed", true)
			}
			s.log.InfoContext(r.Context(), "http request", attrs...)
		}()
		next.ServeHTTP(rec, r.WithContext(context.WithValue(r.Context(), keyLogger, s.log)))
	})
}

// authenticate requires a valid bearer access token.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, token, ok := strings.Cut(h, " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="listing"`)
			writeError(w, r, domain.ErrUnauthenticated)
			return
		}
		user, err := s.deps.Tokens.Verify(token)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="listing", error="invalid_token"`)
			writeError(w, r, domain.ErrUnauthenticated)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyUser, user)))
	})
}

// errWorkspaceNotFound is what a non-member sees: the same as a workspace that does not exist.
var errWorkspaceNotFound = domain.NewError(domain.KindNotFound, "WORKSPACE_NOT_FOUND", "the workspace does not exist")

// requireMember checks that the authenticated user belongs to the {workspace_id} of the path,
// then takes the request's token of the workspace's budget (takeWorkspaceBudget).
func (s *Server) requireMember(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := uuid.Parse(chi.URLParam(r, "workspace_id"))
		if err != nil {
			writeError(w, r, errWorkspaceNotFound)
			return
		}
		ok, err := s.app.Queries.IsMember(r.Context(), query.Scope{WorkspaceID: ws, UserID: userID(r.Context())})
		if err != nil {
			writeError(w, r, err)
			return
		}
		if !ok {
			writeError(w, r, errWorkspaceNotFound)
			return
		}
		if err := s.takeWorkspaceBudget(r.Context(), ws); err != nil {
			writeError(w, r, err)
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), keyWorkspace, ws)))
	})
}
