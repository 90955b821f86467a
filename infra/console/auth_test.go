package console_test

import (
	"context"
	"encoding/base64"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/console"
)

const (
	adaSecret = "ada-secret-0123456789"
	bobSecret = "bob-secret-9876543210"
)

// lazyPool is a pool that never connects: enough for what needs no database.
func lazyPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none?sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
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
		cfg.Pool = lazyPool(t)
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

// Sign-in through the form gives a session cookie (HttpOnly, SameSite=Strict, expiring);
// nothing is shown without it; a wrong token, a tampered or expired cookie, or a changed
// secret gets nothing.
func TestSignInAndSessions(t *testing.T) {
	t.Parallel()
	now := time.Now()
	clock := func() time.Time { return now }
	key := []byte("0123456789abcdef0123456789abcdef")
	ts := newServer(t, console.Config{Operators: operators(), SessionKey: key, SessionTTL: time.Hour, Now: func() time.Time { return clock() }})
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
	var cookie *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "console_session" {
			cookie = ck
		}
	}
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

	// A tampered cookie is refused: another operator's name under ada's signature, or a
	// changed signature.
	u, _ := url.Parse(ts.URL)
	payload, sig, _ := strings.Cut(cookie.Value, ".")
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	require.NoError(t, err)
	asBob := base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(raw), "ada", "bob", 1)))
	flipped := []byte(sig)
	flipped[len(flipped)/2] ^= 1
	for _, v := range []string{asBob + "." + sig, payload + "." + string(flipped), payload} {
		tampered := newClient(t, ts.URL)
		tampered.http.Jar.SetCookies(u, []*http.Cookie{{Name: "console_session", Value: v}})
		status, _ = tampered.get("/")
		require.Equal(t, http.StatusSeeOther, status, v)
	}

	// The same key with ada's secret changed: her session ends.
	changed := newServer(t, console.Config{Operators: map[string]string{"ada": "ada-secret-rotated-1"}, SessionKey: key})
	moved := newClient(t, changed.URL)
	cu, _ := url.Parse(changed.URL)
	moved.http.Jar.SetCookies(cu, []*http.Cookie{{Name: "console_session", Value: cookie.Value}})
	status, _ = moved.get("/")
	require.Equal(t, http.StatusSeeOther, status)
	same := newServer(t, console.Config{Operators: operators(), SessionKey: key})
	kept := newClient(t, same.URL)
	su, _ := url.Parse(same.URL)
	kept.http.Jar.SetCookies(su, []*http.Cookie{{Name: "console_session", Value: cookie.Value}})
	status, _ = kept.get("/")
	require.Equal(t, http.StatusOK, status, "the same key and secret accept the session")

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
	_, err := console.New(console.Config{Pool: lazyPool(t), Production: true})
	require.ErrorContains(t, err, "required in production")
	_, err = console.New(console.Config{})
	require.ErrorContains(t, err, "Pool")

	s, err := console.New(console.Config{Pool: lazyPool(t)})
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
