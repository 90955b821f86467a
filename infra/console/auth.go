package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// DevOperator is the operator of a console without CONSOLE_TOKENS (development, loopback).
const DevOperator = "dev"

// sessionCookie names the session cookie.
const sessionCookie = "console_session"

// session is a signed-in operator: who, until when, and the random nonce its CSRF token is
// derived from.
type session struct {
	Operator string
	Expires  time.Time
	Nonce    string
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

// secretDigest is what a session's signature binds to: the operator's current secret.
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

func (s *Server) mac(parts ...string) []byte {
	m := hmac.New(sha256.New, s.key)
	for _, p := range parts {
		m.Write([]byte(p))
		m.Write([]byte{0})
	}
	return m.Sum(nil)
}

// encodeSession returns the cookie value of ss: payload "." signature, both base64url.
func (s *Server) encodeSession(ss session) string {
	digest, _ := s.secretDigest(ss.Operator)
	payload := ss.Operator + "\x00" + strconv.FormatInt(ss.Expires.Unix(), 10) + "\x00" + ss.Nonce
	sig := s.mac("session", payload, string(digest))
	return base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// decodeSession returns the session of a cookie value when its signature is valid, it has not
// expired and its operator still has the secret it was signed with.
func (s *Server) decodeSession(v string) (session, bool) {
	p64, s64, ok := strings.Cut(v, ".")
	if !ok {
		return session{}, false
	}
	payload, err1 := base64.RawURLEncoding.Strict().DecodeString(p64)
	sig, err2 := base64.RawURLEncoding.Strict().DecodeString(s64)
	if err1 != nil || err2 != nil {
		return session{}, false
	}
	parts := strings.Split(string(payload), "\x00")
	if len(parts) != 3 {
		return session{}, false
	}
	digest, ok := s.secretDigest(parts[0])
	if !ok || !hmac.Equal(sig, s.mac("session", string(payload), string(digest))) {
		return session{}, false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || !s.now().Before(time.Unix(exp, 0)) {
		return session{}, false
	}
	return session{Operator: parts[0], Expires: time.Unix(exp, 0), Nonce: parts[2]}, true
}

// csrfToken is the CSRF token of a session.
func (s *Server) csrfToken(ss *session) string {
	if ss == nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(s.mac("csrf", ss.Nonce))
}

// newSession starts a session for operator and sets its cookie on w.
func (s *Server) newSession(w http.ResponseWriter, r *http.Request, operator string) *session {
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	ss := &session{Operator: operator, Expires: s.now().Add(s.cfg.SessionTTL), Nonce: hex.EncodeToString(nonce)}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: s.encodeSession(*ss), Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: int(s.cfg.SessionTTL / time.Second)})
	return ss
}

func clearSession(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: secureRequest(r), MaxAge: -1})
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

// authenticate finds who makes r: a Bearer secret, a valid session cookie, or (development
// without operators) a new "dev" session. ok false: nobody; bearerFailed: an Authorization
// header was sent and refused.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (id identity, ok, bearerFailed bool) {
	if h := r.Header.Get("Authorization"); h != "" {
		scheme, secret, _ := strings.Cut(h, " ")
		if !strings.EqualFold(scheme, "Bearer") {
			return identity{}, false, true
		}
		name, found := s.operatorBySecret(strings.TrimSpace(secret))
		return identity{Operator: name}, found, !found
	}
	if c, err := r.Cookie(sessionCookie); err == nil {
		if ss, valid := s.decodeSession(c.Value); valid {
			return identity{Operator: ss.Operator, Session: &ss}, true, false
		}
	}
	if s.dev() {
		ss := s.newSession(w, r, DevOperator)
		return identity{Operator: DevOperator, Session: ss}, true, false
	}
	return identity{}, false, false
}

// requireOperator serves next only to an authenticated operator; POSTs from a session must
// carry its CSRF token. Others get a redirect to the sign-in form (GET) or 401/403.
func (s *Server) requireOperator(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, ok, bearerFailed := s.authenticate(w, r)
		switch {
		case bearerFailed:
			w.Header().Set("WWW-Authenticate", `Bearer realm="console"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		case !ok && r.Method == http.MethodGet:
			http.Redirect(w, r, "/signin", http.StatusSeeOther)
			return
		case !ok:
			http.Error(w, "unauthorized: sign in first", http.StatusUnauthorized)
			return
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
