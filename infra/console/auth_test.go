package console_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

const (
	adaSecret = "ada-secret-0123456789"
	bobSecret = "bob-secret-9876543210"
)

// operatorPool is a pool as listing_operator on a database of the test's own.
func operatorPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	return pgtest.New(t).OperatorPool(t)
}

// client is a browser-like client with a cookie jar that does not follow redirects.
type client struct {
	t    *testing.T
	base string
	http *http.Client
	// header is added to every request.
	header http.Header
}

func newClient(t *testing.T, base string) *client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &client{t: t, base: base, header: http.Header{}, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

// do sends a request and returns the status, the body and the response.
func (c *client) do(method, path string, form url.Values) (int, string, *http.Response) {
	c.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, c.base+path, body)
	require.NoError(c.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := c.http.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	return resp.StatusCode, string(b), resp
}

func (c *client) get(path string) (int, string) {
	c.t.Helper()
	status, body, _ := c.do(http.MethodGet, path, nil)
	return status, body
}

func (c *client) post(path string, form url.Values) (int, string, *http.Response) {
	c.t.Helper()
	return c.do(http.MethodPost, path, form)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// csrf returns the CSRF token of a page.
func csrf(t *testing.T, body string) string {
	t.Helper()
	m := csrfRe.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field in the page")
	return m[1]
}

func newServer(t *testing.T, cfg console.Config) *httptest.Server {
	t.Helper()
	if cfg.Pool == nil {
		cfg.Pool = operatorPool(t)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := console.New(cfg)
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts
}

func operators() map[string]string { return map[string]string{"ada": adaSecret, "bob": bobSecret} }

// Sign-in through the form gives a session cookie (HttpOnly, SameSite=Strict, expiring)
// that every console on the database accepts; nothing is shown without it; a wrong token, a
// tampered or expired cookie, or a changed secret gets nothing.
func TestSignInAndSessions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	pool := operatorPool(t)
	ts := newServer(t, console.Config{Operators: operators(), Pool: pool, SessionTTL: time.Hour, Now: func() time.Time { return clock() }})
	c := newClient(t, ts.URL)

	status, body, resp := c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/signin", resp.Header.Get("Location"))
	for _, p := range []string{"/outbox", "/queues", "/operations", "/outbox/event"} {
		status, body = c.get(p)
		require.Equal(t, http.StatusSeeOther, status, p)
		require.NotContains(t, body, "<table", p)
	}
	status, body = c.get("/signin")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `name="token"`)
	require.NotContains(t, body, `href="/outbox"`, "no page is linked before sign-in")

	status, body, _ = c.post("/signin", url.Values{"token": {"ada-secret-wrong-123"}})
	require.Equal(t, http.StatusUnauthorized, status)
	require.Contains(t, body, "Unknown token")

	status, _, resp = c.post("/signin", url.Values{"token": {adaSecret}})
	require.Equal(t, http.StatusSeeOther, status)
	cookie := sessionCookieOf(resp)
	require.NotNil(t, cookie)
	require.True(t, cookie.HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, cookie.SameSite)
	require.Equal(t, 3600, cookie.MaxAge)
	require.NotContains(t, cookie.Value, adaSecret)

	status, body, resp = c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<strong id="operator">ada</strong>`)
	for _, link := range []string{`href="/outbox"`, `href="/queues"`, `href="/operations"`} {
		require.Contains(t, body, link)
	}
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))

	// A tampered cookie is refused: one character changed, cut short, or made up.
	changedChar := []byte(cookie.Value)
	changedChar[len(changedChar)/2] ^= 1
	for _, v := range []string{string(changedChar), cookie.Value[:len(cookie.Value)-2], base64.RawURLEncoding.EncodeToString(make([]byte, 32))} {
		status = withCookie(t, ts.URL, v)
		require.Equal(t, http.StatusSeeOther, status, v)
	}

	// Another console on the same database (another process, or this one restarted) accepts
	// the session; with ada's secret changed, her session ends.
	same := newServer(t, console.Config{Operators: operators(), Pool: pool})
	require.Equal(t, http.StatusOK, withCookie(t, same.URL, cookie.Value), "another console accepts the session")
	changed := newServer(t, console.Config{Operators: map[string]string{"ada": "ada-secret-rotated-1"}, Pool: pool})
	require.Equal(t, http.StatusSeeOther, withCookie(t, changed.URL, cookie.Value), "a changed secret ends the session")

	// Expired.
	clock = func() time.Time { return now.Add(61 * time.Minute) }
	status, _ = c.get("/")
	require.Equal(t, http.StatusSeeOther, status)
	clock = func() time.Time { return now }

	// Sign out clears the cookie.
	_, body = c.get("/")
	status, _, resp = c.post("/signout", url.Values{"csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/signin", resp.Header.Get("Location"))
	status, _ = c.get("/")
	require.Equal(t, http.StatusSeeOther, status)
}

// sessionCookieOf returns the session cookie a response sets, nil when none.
func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == "console_session" {
			return ck
		}
	}
	return nil
}

// withCookie sends GET / with the session cookie value v from a fresh client and returns the
// status (200: a live session; 303 to /signin: none).
func withCookie(t *testing.T, base, v string) int {
	t.Helper()
	c := newClient(t, base)
	u, err := url.Parse(base)
	require.NoError(t, err)
	c.http.Jar.SetCookies(u, []*http.Cookie{{Name: "console_session", Value: v}})
	status, _ := c.get("/")
	return status
}

// Signing out ends the session on the server: a copy of the cookie kept from before (another
// tab, a stolen copy) is refused afterwards, by this console and by another one on the same
// database, and cannot sign out or act either.
func TestSignOutEndsSession(t *testing.T) {
	t.Parallel()
	pool := operatorPool(t)
	ts := newServer(t, console.Config{Operators: operators(), Pool: pool})
	other := newServer(t, console.Config{Operators: operators(), Pool: pool})
	c := newClient(t, ts.URL)
	status, _, resp := c.post("/signin", url.Values{"token": {adaSecret}})
	require.Equal(t, http.StatusSeeOther, status)
	cookie := sessionCookieOf(resp)
	require.NotNil(t, cookie)
	require.Equal(t, http.StatusOK, withCookie(t, ts.URL, cookie.Value), "the copy works before sign-out")

	status, body := c.get("/")
	require.Equal(t, http.StatusOK, status)
	token := csrf(t, body)
	status, _, _ = c.post("/signout", url.Values{"csrf": {token}})
	require.Equal(t, http.StatusSeeOther, status)

	require.Equal(t, http.StatusSeeOther, withCookie(t, ts.URL, cookie.Value), "the cookie is dead after sign-out")
	require.Equal(t, http.StatusSeeOther, withCookie(t, other.URL, cookie.Value), "on every console")
	stale := newClient(t, ts.URL)
	u, _ := url.Parse(ts.URL)
	stale.http.Jar.SetCookies(u, []*http.Cookie{{Name: "console_session", Value: cookie.Value}})
	status, _, _ = stale.post("/outbox/redrive", url.Values{"csrf": {token}, "workspace": {"x"}, "id": {"y"}, "reason": {"r"}})
	require.Equal(t, http.StatusUnauthorized, status, "a revoked session cannot act")
}

// Scripts authenticate with Authorization: Bearer and need no CSRF token; a wrong or
// malformed header is 401 whatever the cookie says.
func TestBearer(t *testing.T) {
	t.Parallel()
	ts := newServer(t, console.Config{Operators: operators()})
	c := newClient(t, ts.URL)
	c.header.Set("Authorization", "Bearer "+bobSecret)
	status, body := c.get("/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<strong id="operator">bob</strong>`)
	// Past authentication and CSRF: the form itself is refused.
	status, _, _ = c.post("/outbox/redrive", url.Values{"workspace": {"x"}})
	require.Equal(t, http.StatusBadRequest, status)

	for _, h := range []string{"Bearer " + adaSecret + "x", "Bearer", "Basic " + adaSecret, adaSecret} {
		c.header.Set("Authorization", h)
		status, body = c.get("/")
		require.Equal(t, http.StatusUnauthorized, status, h)
		require.NotContains(t, body, "operator")
	}
}

// A session's POST needs its CSRF token; a cross-origin POST is refused even with it.
func TestCSRF(t *testing.T) {
	t.Parallel()
	ts := newServer(t, console.Config{Operators: operators()})
	c := newClient(t, ts.URL)
	status, _, _ := c.post("/signin", url.Values{"token": {adaSecret}})
	require.Equal(t, http.StatusSeeOther, status)
	_, body := c.get("/")
	token := csrf(t, body)

	form := url.Values{"workspace": {"x"}, "id": {"y"}, "reason": {"r"}}
	status, _, _ = c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusForbidden, status, "no token")
	form.Set("csrf", token+"x")
	status, _, _ = c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusForbidden, status, "wrong token")
	form.Set("csrf", token)
	status, _, _ = c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusBadRequest, status, "past CSRF: the ids are refused")

	// Another session's token does not fit this session.
	other := newClient(t, ts.URL)
	other.post("/signin", url.Values{"token": {adaSecret}})
	form.Set("csrf", token)
	status, _, _ = other.post("/outbox/redrive", form)
	require.Equal(t, http.StatusForbidden, status)

	c.header.Set("Origin", "http://evil.example")
	c.header.Set("Sec-Fetch-Site", "cross-site")
	status, _, _ = c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusForbidden, status, "cross-origin")
}

// Without operators: production refuses to start; development serves loopback clients with
// a loopback Host only, as "dev", with CSRF like any session.
func TestDevelopmentWithoutTokens(t *testing.T) {
	t.Parallel()
	_, err := console.New(console.Config{Pool: operatorPool(t), Production: true})
	require.ErrorContains(t, err, "required in production")
	_, err = console.New(console.Config{})
	require.ErrorContains(t, err, "Pool")

	s, err := console.New(console.Config{Pool: operatorPool(t)})
	require.NoError(t, err)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	c := newClient(t, ts.URL)
	status, body := c.get("/")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<strong id="operator">dev</strong>`)
	status, _ = c.get("/signin")
	require.Equal(t, http.StatusSeeOther, status, "nothing to sign in to")
	status, _, _ = c.post("/outbox/redrive", url.Values{"reason": {"x"}})
	require.Equal(t, http.StatusForbidden, status, "CSRF applies to dev too")
	status, _, _ = c.post("/outbox/redrive", url.Values{"reason": {"x"}, "csrf": {csrf(t, body)}})
	require.Equal(t, http.StatusBadRequest, status)

	// A remote client, or a loopback client reaching us under another name (DNS rebinding).
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "192.0.2.10:41000"
	req.Host = "127.0.0.1:8081"
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.Code)
	require.NotContains(t, rec.Body.String(), "Outbox")
	req = httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = "127.0.0.1:41000"
	req.Host = "rebound.example:8081"
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	require.Equal(t, http.StatusForbidden, rec.Code)
	req.Host = "localhost:8081"
	rec = httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
}

// signinFrom posts the sign-in form with token to h as a client at remote, and returns the
// recorded answer.
func signinFrom(t *testing.T, h http.Handler, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(requestContext(t), http.MethodPost, "/signin", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// requestContext bounds a request of the test: a stalled database fails it in seconds.
func requestContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// bearerFrom sends GET / with Authorization: Bearer token to h as a client at remote.
func bearerFrom(t *testing.T, h http.Handler, remote, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(requestContext(t), http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.RemoteAddr = remote
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// A client address that sends SigninFailures wrong secrets (form or Bearer) within the window
// gets 429 with Retry-After for its next attempts, the right secret included, until the
// oldest failure leaves the window; an operator at another address signs in meanwhile (the
// limit is no lockout a stranger can impose); an IPv6 client counts as its /64.
func TestSigninLimit(t *testing.T) {
	t.Parallel()
	now := time.Now()
	var clock atomic.Pointer[time.Time]
	clock.Store(&now)
	s, err := console.New(console.Config{Operators: operators(), Pool: operatorPool(t), Logger: slog.New(slog.DiscardHandler),
		SigninFailures: 10, SigninWindow: 15 * time.Minute,
		Now: func() time.Time { return *clock.Load() }})
	require.NoError(t, err)

	const attacker = "192.0.2.66:40000"
	for i := range 10 {
		var rec *httptest.ResponseRecorder
		if i%2 == 0 {
			rec = signinFrom(t, s, attacker, fmt.Sprintf("guess-%02d-0123456789", i))
		} else {
			rec = bearerFrom(t, s, attacker, fmt.Sprintf("guess-%02d-0123456789", i))
		}
		require.Equal(t, http.StatusUnauthorized, rec.Code, "failure %d is within the budget", i+1)
	}
	rec := signinFrom(t, s, attacker, "guess-10-0123456789")
	require.Equal(t, http.StatusTooManyRequests, rec.Code, "the 11th attempt")
	require.Equal(t, "900", rec.Header().Get("Retry-After"))
	require.Equal(t, http.StatusTooManyRequests, signinFrom(t, s, attacker, adaSecret).Code, "the right secret is not even compared")
	require.Equal(t, http.StatusTooManyRequests, bearerFrom(t, s, "192.0.2.66:40001", bobSecret).Code, "nor through Bearer, from another port")

	// The operator, elsewhere, signs in and works while the stranger is held back.
	rec = signinFrom(t, s, "198.51.100.7:50000", adaSecret)
	require.Equal(t, http.StatusSeeOther, rec.Code)
	require.NotEmpty(t, rec.Result().Cookies())
	require.Equal(t, http.StatusOK, bearerFrom(t, s, "198.51.100.7:50001", bobSecret).Code)

	// The window moves on: the attacker's budget comes back, not before.
	later := now.Add(15*time.Minute - time.Second)
	clock.Store(&later)
	require.Equal(t, http.StatusTooManyRequests, signinFrom(t, s, attacker, adaSecret).Code)
	later = now.Add(15*time.Minute + time.Second)
	clock.Store(&later)
	require.Equal(t, http.StatusSeeOther, signinFrom(t, s, attacker, adaSecret).Code)

	// IPv6: one /64 is one client.
	for i := range 10 {
		remote := fmt.Sprintf("[2001:db8:1:1::%x]:443", i+1)
		require.Equal(t, http.StatusUnauthorized, bearerFrom(t, s, remote, "wrong-wrong-wrong-wrong").Code, remote)
	}
	require.Equal(t, http.StatusTooManyRequests, bearerFrom(t, s, "[2001:db8:1:1:ffff::1]:443", adaSecret).Code)
	require.Equal(t, http.StatusOK, bearerFrom(t, s, "[2001:db8:1:2::1]:443", adaSecret).Code, "the next /64 is another client")
}

// Concurrent wrong secrets from one address cannot overrun its budget: of 30 at once, at
// most 10 are compared (401), the others are refused (429).
func TestSigninLimitConcurrent(t *testing.T) {
	t.Parallel()
	s, err := console.New(console.Config{Operators: operators(), Pool: operatorPool(t), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	codes := make([]int, 30)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Go(func() { codes[i] = signinFrom(t, s, "203.0.113.9:1000", fmt.Sprintf("guess-%02d-0123456789", i)).Code })
	}
	wg.Wait()
	counts := map[int]int{}
	for _, c := range codes {
		counts[c]++
	}
	require.LessOrEqual(t, counts[http.StatusUnauthorized], 10, "%v", counts)
	require.Equal(t, 30, counts[http.StatusUnauthorized]+counts[http.StatusTooManyRequests], "%v", counts)
	require.Equal(t, http.StatusTooManyRequests, signinFrom(t, s, "203.0.113.9:1001", adaSecret).Code)
}
