package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Server is a sandbox listening on a local port.
type Server struct {
	// URL is the base URL to configure adapters with, e.g. "http://127.0.0.1:41234".
	URL string
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup
}

// Start serves h on addr ("" means "127.0.0.1:0", a free loopback port) until Close.
func Start(addr string, h http.Handler) (*Server, error) {
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("sandbox.Start: %w", err)
	}
	s := &Server{
		URL: "http://" + ln.Addr().String(),
		srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second},
		ln:  ln,
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Close stops the server, waiting up to 5 s for requests in flight.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	s.wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("sandbox.Close: %w", err)
	}
	return nil
}

// Fault is an injected failure for the next Count calls of Endpoint.
type Fault struct {
	// Endpoint is the sandbox's endpoint name (e.g. "POST /v1/products"); "" matches any.
	Endpoint string `json:"endpoint"`
	// Status is the HTTP status to answer: 500, 502, 503, 429… Default 500.
	Status int `json:"status"`
	// Count is how many calls fail. Default 1.
	Count int `json:"count"`
	// RetryAfter is sent as Retry-After (whole seconds) with a 429 (default 1 s) or, when
	// set, with a 503.
	RetryAfter time.Duration `json:"-"`
	// RetryAfterSeconds is RetryAfter for the JSON admin endpoint.
	RetryAfterSeconds int `json:"retry_after_seconds"`
	// AfterEffect performs the call (e.g. creates the product) and then answers Status, so
	// the caller cannot tell whether it happened.
	AfterEffect bool `json:"after_effect"`
}

// Faults is a queue of injected faults plus an artificial latency. Safe for concurrent use.
type Faults struct {
	mu      sync.Mutex
	queue   []Fault
	latency time.Duration
}

// Inject queues f (after defaults: Status 500, Count 1).
func (f *Faults) Inject(ft Fault) {
	if ft.Status == 0 {
		ft.Status = http.StatusInternalServerError
	}
	if ft.Count <= 0 {
		ft.Count = 1
	}
	if ft.RetryAfter == 0 && ft.RetryAfterSeconds > 0 {
		ft.RetryAfter = time.Duration(ft.RetryAfterSeconds) * time.Second
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = append(f.queue, ft)
}

// SetLatency delays every later call by d (0 disables).
func (f *Faults) SetLatency(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = d
}

// Latency returns the configured latency.
func (f *Faults) Latency() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.latency
}

// Next consumes one call of the first queued fault matching endpoint.
func (f *Faults) Next(endpoint string) (Fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.queue {
		ft := &f.queue[i]
		if ft.Endpoint != "" && ft.Endpoint != endpoint {
			continue
		}
		out := *ft
		ft.Count--
		if ft.Count <= 0 {
			f.queue = append(f.queue[:i], f.queue[i+1:]...)
		}
		return out, true
	}
	return Fault{}, false
}

// Reset drops every queued fault and the latency.
func (f *Faults) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.queue = nil
	f.latency = 0
}

// Sleep waits for the configured latency or until ctx is done.
func (f *Faults) Sleep(ctx context.Context) {
	d := f.Latency()
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// FaultHeaders returns the headers a fault response carries (Retry-After for a 429, and for
// a 503 that sets one).
func FaultHeaders(ft Fault) http.Header {
	h := http.Header{}
	if ft.Status == http.StatusTooManyRequests || (ft.Status == http.StatusServiceUnavailable && ft.RetryAfter > 0) {
		secs := int(ft.RetryAfter.Round(time.Second) / time.Second)
		if secs < 1 {
			secs = 1
		}
		h.Set("Retry-After", strconv.Itoa(secs))
	}
	return h
}

// WriteJSON writes v as JSON with status and the extra headers.
func WriteJSON(w http.ResponseWriter, status int, h http.Header, v any) {
	for k, vs := range h {
		for _, x := range vs {
			w.Header().Add(k, x)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header, or "".
func BearerToken(r *http.Request) string {
	const prefix = "bearer "
	h := r.Header.Get("Authorization")
	if len(h) <= len(prefix) || !equalFold(h[:len(prefix)], prefix) {
		return ""
	}
	return h[len(prefix):]
}

func equalFold(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		x, y := a[i], b[i]
		if 'A' <= x && x <= 'Z' {
			x += 'a' - 'A'
		}
		if x != y {
			return false
		}
	}
	return true
}
