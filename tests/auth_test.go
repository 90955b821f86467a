package tests

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/internal/servicetest"
)

func TestAuthRegisterLoginRefresh(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	acct := env.Register("ada@example.com")

	// The access token opens the workspace.
	resp := env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces", Token: acct.AccessToken})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	require.Contains(t, string(resp.Body), acct.WorkspaceID)

	// Login with the right password; same error for a wrong password and an unknown email.
	resp = env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/login", Body: map[string]string{"email": "ADA@example.com", "password": acct.Password}})
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	for _, body := range []map[string]string{
		{"email": "ada@example.com", "password": "wrong password!"},
		{"email": "nobody@example.com", "password": acct.Password},
	} {
		resp = env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/login", Body: body})
		require.Equal(t, http.StatusUnauthorized, resp.Status)
		require.Equal(t, "INVALID_CREDENTIALS", resp.Code())
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	}

	// Rotation: the first refresh succeeds; presenting the spent token again revokes the
	// family, so even the token issued by the rotation stops working.
	first := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/refresh", Body: map[string]string{"refresh_token": acct.RefreshToken}})
	require.Equal(t, http.StatusOK, first.Status, "%s", first.Body)
	rotated := first.JSON(t)["refresh_token"].(string)
	require.NotEqual(t, acct.RefreshToken, rotated)

	reuse := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/refresh", Body: map[string]string{"refresh_token": acct.RefreshToken}})
	require.Equal(t, http.StatusUnauthorized, reuse.Status)
	require.Equal(t, "REFRESH_TOKEN_REUSED", reuse.Code())

	after := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/refresh", Body: map[string]string{"refresh_token": rotated}})
	require.Equal(t, http.StatusUnauthorized, after.Status)
	require.Equal(t, "REFRESH_TOKEN_INVALID", after.Code())
	require.Equal(t, 1, env.Count(`SELECT count(*) FROM refresh_token_families WHERE revoked_at IS NOT NULL`))

	// A second login family is unaffected.
	login := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/login", Body: map[string]string{"email": "ada@example.com", "password": acct.Password}})
	other := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/refresh", Body: map[string]string{"refresh_token": login.JSON(t)["refresh_token"].(string)}})
	require.Equal(t, http.StatusOK, other.Status)

	// Auth endpoints never use the idempotency store, and never log passwords or tokens.
	require.Zero(t, env.Count(`SELECT count(*) FROM idempotency_requests`))
	logs := env.Logs()
	require.NotContains(t, logs, acct.Password)
	require.NotContains(t, logs, acct.RefreshToken)
	require.NotContains(t, logs, acct.AccessToken)
}

func TestAuthRegisterRejectsDuplicateEmailAndBadInput(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	env.Register("grace@example.com")

	resp := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/register", Body: map[string]string{
		"email": "Grace@Example.com", "password": "another long password", "workspace_name": "x"}})
	require.Equal(t, http.StatusConflict, resp.Status)
	require.Equal(t, "EMAIL_TAKEN", resp.Code())

	users := env.Count(`SELECT count(*) FROM users`)
	workspaces := env.Count(`SELECT count(*) FROM workspaces`)
	big := `{"email":"big@example.com","password":"long enough password","workspace_name":"` + strings.Repeat("x", 2<<20) + `"}`
	cases := []struct {
		name   string
		body   any
		header map[string]string
		status int
		code   string
	}{
		{"malformed JSON", `{"email": "x@example.com",`, nil, 400, "MALFORMED_JSON"},
		{"trailing data", `{"email":"x@example.com","password":"long enough password","workspace_name":"w"} {}`, nil, 400, "MALFORMED_JSON"},
		{"unknown field", `{"email":"x@example.com","password":"long enough password","workspace_name":"w","admin":true}`, nil, 400, "UNKNOWN_FIELD"},
		{"wrong type", `{"email":1,"password":"long enough password","workspace_name":"w"}`, nil, 400, "VALIDATION_FAILED"},
		{"oversized", big, nil, 413, "BODY_TOO_LARGE"},
		{"wrong content type", `{"email":"x@example.com","password":"long enough password","workspace_name":"w"}`, map[string]string{"Content-Type": "text/plain"}, 415, "UNSUPPORTED_MEDIA_TYPE"},
		{"short password", `{"email":"x@example.com","password":"short","workspace_name":"w"}`, nil, 400, "VALIDATION_FAILED"},
		{"bad email", `{"email":"not-an-email","password":"long enough password","workspace_name":"w"}`, nil, 400, "VALIDATION_FAILED"},
	}
	for _, c := range cases {
		resp := env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/register", Body: c.body, Header: c.header})
		require.Equal(t, c.status, resp.Status, "%s: %s", c.name, resp.Body)
		require.Equal(t, c.code, resp.Code(), c.name)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"), c.name)
		require.NotContains(t, string(resp.Body), "long enough password", c.name)
	}
	require.Equal(t, users, env.Count(`SELECT count(*) FROM users`), "a refused request wrote a user")
	require.Equal(t, workspaces, env.Count(`SELECT count(*) FROM workspaces`), "a refused request wrote a workspace")
}

func TestAuthRateLimit(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t, func(c *config.Config) { c.AuthRatePerMinute = 3 })
	var last servicetest.Response
	for i := 0; i < 4; i++ {
		last = env.Do(servicetest.Request{Method: "POST", Path: "/v1/auth/login", Body: map[string]string{"email": "eve@example.com", "password": "guess number one"}})
	}
	require.Equal(t, http.StatusTooManyRequests, last.Status)
	require.Equal(t, "RATE_LIMITED", last.Code())
	require.NotEmpty(t, last.Header.Get("Retry-After"))
}

func TestWorkspaceMembershipAndAuthentication(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	alice := env.Register("alice@example.com")
	bob := env.Register("bob@example.com")

	// No token, or a forged one: 401.
	resp := env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + alice.WorkspaceID + "/products"})
	require.Equal(t, http.StatusUnauthorized, resp.Status)
	resp = env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + alice.WorkspaceID + "/products", Token: alice.AccessToken + "x"})
	require.Equal(t, http.StatusUnauthorized, resp.Status)

	// A non-member gets the same 404 as for a workspace that does not exist.
	resp = env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + alice.WorkspaceID + "/products", Token: bob.AccessToken})
	require.Equal(t, http.StatusNotFound, resp.Status)
	require.Equal(t, "WORKSPACE_NOT_FOUND", resp.Code())
	resp = env.Do(servicetest.Request{Method: "POST", Path: "/v1/workspaces/" + alice.WorkspaceID + "/products", Token: bob.AccessToken,
		Body: map[string]string{"title": "x", "price": "1", "currency": "EUR"}})
	require.Equal(t, http.StatusNotFound, resp.Status)
	require.Zero(t, env.Count(`SELECT count(*) FROM products`))

	resp = env.Do(servicetest.Request{Method: "GET", Path: "/v1/workspaces/" + alice.WorkspaceID + "/products", Token: alice.AccessToken})
	require.Equal(t, http.StatusOK, resp.Status)
}

func TestHealthReadyMetrics(t *testing.T) {
	t.Parallel()
	env := servicetest.Start(t)
	require.Equal(t, 200, env.Do(servicetest.Request{Method: "GET", Path: "/healthz"}).Status)
	ready := env.Do(servicetest.Request{Method: "GET", Path: "/readyz"})
	require.Equal(t, 200, ready.Status, "%s", ready.Body)
	env.Register("metrics@example.com")
	metrics := env.Do(servicetest.Request{Method: "GET", Path: "/metrics"})
	require.Equal(t, 200, metrics.Status)
	require.Contains(t, string(metrics.Body), `listing_http_requests_total{method="POST",route="/v1/auth/register",status="201"} 1`)
	require.Contains(t, string(metrics.Body), `listing_commands_total{command="RegisterUser",outcome="ok"} 1`)
	require.Equal(t, 200, env.Do(servicetest.Request{Method: "GET", Path: "/openapi.yaml"}).Status)
	notFound := env.Do(servicetest.Request{Method: "GET", Path: "/nope"})
	require.Equal(t, 404, notFound.Status)
	require.Equal(t, "NOT_FOUND", notFound.Code())
}
