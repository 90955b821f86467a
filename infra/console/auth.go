package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/listingkit/listing/infra/clientkey"
)

// DevOperator is the operator of a console without CONSOLE_TOKENS (development, loopback).
const DevOperator = "dev"

// sessionCookie names the session cookie.
const sessionCookie = "console_session"

// session is a signed-in operator: who, until when, and its random id (the cookie's value;
// its CSRF token is derived from it).
type session struct {
	Operator string
	Expires  time.Time
	ID       []byte
}

type ctxKey struct{}

// identity is who makes a request, and how.
type identity struct {
	Operator string
	// Session is set when the request came with a session cookie (then POSTs need CSRF);
	// nil for Bearer requests.
	Session *session
}

func withIdentity(ctx context.Context, id identity) context.Context {
	return context.WithValue(ctx, ctxKey{}, id)
}

func identityOf(r *http.Request) identity {
	id, _ := r.Context().Value(ctxKey{}).(identity)
	return id
}

// secretDigest is what a session is bound to: a digest of the operator's current secret.
func (s *Server) secretDigest(operator string) ([]byte, bool) {
	if s.dev() {
		if operator != DevOperator {
			return nil, false
		}
		return []byte{}, true
	}
	secret, ok := s.cfg.Operators[operator]
	if !ok {
		return nil, false
	}
	sum := sha256.Sum256([]byte(secret))
	return sum[:], true
}

// csrfToken is the CSRF token of a session: an HMAC of a fixed label under its id, so every
// console process derives the same one.
func (s *Server) csrfToken(ss *session) string {
	if ss == nil {
		return ""
	}
	m := hmac.New(sha256.New, ss.ID)
	m.Write([]byte("console-csrf"))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newSession starts a session for operator, records it and sets its cookie on w.
func (s *Server) newSession(w http.ResponseWriter, r *http.Request, operator string) (*session, error) {
	id := make([]byte, sessionIDBytes)
	if _, err := rand.Read(id); err != nil {
		return nil, err
	}
	ss := &session{Operator: operator, Expires: s.now().Add(s.cfg.SessionTTL), ID: id}
	digest, _ := s.secretDigest(operator)
	if err := s.sessions.create(r.Context(), *ss, digest); err != nil {
		return nil, err
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: base64.RawURLEncoding.EncodeToString(id), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: int(s.cfg.SessionTTL / time.Second)})
	return ss, nil
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: -1})
}

// cookieSession returns the live session of r's cookie, if any (missing, malformed, unknown,
// revoked, expired or bound to another secret: none).
func (s *Server) cookieSession(r *http.Request) (*session, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, nil
	}
	id, err := base64.RawURLEncoding.Strict().DecodeString(c.Value)
	if err != nil || len(id) != sessionIDBytes {
		return nil, nil
	}
	ss, ok, err := s.sessions.find(r.Context(), id)
	if err != nil || !ok {
		return nil, err
	}
	return &ss, nil
}

// secureRequest reports whether the client reached us over TLS (directly, or as a proxy in
// front says): the cookie is then marked Secure. The header can only add that restriction.
func secureRequest(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// operatorBySecret returns the operator whose secret is secret, comparing digests in constant
// time with every operator.
func (s *Server) operatorBySecret(secret string) (string, bool) {
	if secret == "" {
		return "", false
	}
	given := sha256.Sum256([]byte(secret))
	found := ""
	for name, sec := range s.cfg.Operators {
		want := sha256.Sum256([]byte(sec))
		if subtle.ConstantTimeCompare(given[:], want[:]) == 1 {
			found = name
		}
	}
	return found, found != ""
}

// checkSecret finds the operator of a secret a client sent (sign-in form or Bearer), holding
// the client's address to its budget of failures: retryAfter > 0 when the budget is spent
// (the secret is then not even compared).
func (s *Server) checkSecret(r *http.Request, secret string) (operator string, ok bool, retryAfter time.Duration, err error) {
	client := clientkey.Of(r.RemoteAddr) // an IPv6 client as its /64
	attempt, retryAfter, err := s.limiter.admit(r.Context(), client)
	if err != nil || retryAfter > 0 {
		if retryAfter > 0 {
			s.log.Warn("console: sign-in refused: too many failures from this client", "remote", client)
		}
		return "", false, retryAfter, err
	}
	operator, ok = s.operatorBySecret(secret)
	if ok {
		s.limiter.forget(r.Context(), attempt)
		return operator, true, 0, nil
	}
	s.log.Warn("console: sign-in refused", "remote", client)
	return "", false, 0, nil
}

// tooManyFailures answers a client whose sign-in budget is spent.
func tooManyFailures(w http.ResponseWriter, retryAfter time.Duration) {
	w.Header().Set("Retry-After", strconv.Itoa(int((retryAfter+time.Second-1)/time.Second)))
	http.Error(w, "too many failed sign-ins from this address: try again later", http.StatusTooManyRequests)
}

// refusedCheck answers a checkSecret that could not judge the secret: 500 for err, 429 while
// the address is over its budget (retryAfter > 0). It reports whether it answered.
func (s *Server) refusedCheck(w http.ResponseWriter, retryAfter time.Duration, err error) bool {
	switch {
	case err != nil:
		s.internalError(w, err)
	case retryAfter > 0:
		tooManyFailures(w, retryAfter)
	default:
		return false
	}
	return true
}

// bearerOperator authenticates a request's Authorization header h (a Bearer secret), or
// answers it (401, 429, 500) and returns false.
func (s *Server) bearerOperator(w http.ResponseWriter, r *http.Request, h string) (identity, bool) {
	scheme, secret, _ := strings.Cut(h, " ")
	name, ok := "", false
	if strings.EqualFold(scheme, "Bearer") {
		var retryAfter time.Duration
		var err error
		if name, ok, retryAfter, err = s.checkSecret(r, strings.TrimSpace(secret)); s.refusedCheck(w, retryAfter, err) {
			return identity{}, false
		}
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="console"`)
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return identity{}, false
	}
	return identity{Operator: name}, true
}

// requireOperator serves next only to an authenticated operator: a Bearer secret, a live
// session cookie, or (development without operators) a new "dev" session. POSTs from a
// session must carry its CSRF token. Others get a redirect to the sign-in form (GET), 401,
// 403, or 429 when their address spent its budget of failed secrets.
func (s *Server) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id identity
		if h := r.Header.Get("Authorization"); h != "" {
			var ok bool
			if id, ok = s.bearerOperator(w, r, h); !ok {
				return
			}
		} else {
			ss, err := s.cookieSession(r)
			if err == nil && ss == nil && s.dev() {
				ss, err = s.newSession(w, r, DevOperator)
			}
			switch {
			case err != nil:
				s.internalError(w, err)
				return
			case ss == nil && r.Method == http.MethodGet:
				http.Redirect(w, r, "/signin", http.StatusSeeOther)
				return
			case ss == nil:
				http.Error(w, "unauthorized: sign in first", http.StatusUnauthorized)
				return
			}
			id = identity{Operator: ss.Operator, Session: ss}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && id.Session != nil {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
			want := s.csrfToken(id.Session)
			if got := r.PostFormValue("csrf"); subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
				s.log.Warn("console: CSRF token missing or wrong", "operator", id.Operator, "path", r.URL.Path)
				http.Error(w, "forbidden: missing or wrong CSRF token (reload the page)", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(withIdentity(r.Context(), id)))
	})
}

// internalError answers 500 for an error of the console's own (logged, never shown).
func (s *Server) internalError(w http.ResponseWriter, err error) {
	s.log.Error("console: request failed", "err", err)
	http.Error(w, "internal error", http.StatusInternalServerError)
}

// loopbackOnly refuses, in development without operators, clients that are not on loopback
// and requests whose Host is not a loopback name (a DNS-rebound name would otherwise let a web
// page read the console through the operator's browser).
func (s *Server) loopbackOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.dev() && (!loopbackHost(remoteHost(r.RemoteAddr)) || !loopbackHost(hostOnly(r.Host))) {
			http.Error(w, "forbidden: without CONSOLE_TOKENS the console serves loopback clients only", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func remoteHost(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func hostOnly(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.Trim(host, "[]")
}

func loopbackHost(h string) bool {
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && ip.IsLoopback()
}
