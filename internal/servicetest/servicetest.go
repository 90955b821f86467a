// Package servicetest starts the assembled service (the same wire injectors cmd/app uses) on
// an isolated database and a real Redis, behind an httptest server, and offers small HTTP
// helpers. Logs are captured so tests can assert what never appears in them.
package servicetest

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/redistest"
)

// Env is one running service.
type Env struct {
	T      testing.TB
	DB     *pgtest.DB
	Config config.Config
	API    *listing.API
	URL    string
	// Work is set by StartAll: the job consumers and the sandboxes they call.
	Work *listing.Work
	logs *SyncBuffer
}

// Option changes the configuration before the service starts.
type Option func(*config.Config)

// Start assembles and serves the API for t; everything stops when t ends.
func Start(t testing.TB, opts ...Option) *Env {
	t.Helper()
	e, _ := start(t, opts)
	return e
}

// StartAll is Start plus, in the same process, the outbox dispatcher and the job consumers
// of every queue, against the development sandboxes (on free ports), local storage in a
// temporary directory and a BullMQ prefix of its own, which is also its STREAM_PREFIX:
// every flow runs end to end.
func StartAll(t testing.TB, opts ...Option) *Env {
	t.Helper()
	e, log := start(t, append([]Option{func(c *config.Config) {
		c.BullMQPrefix = "t" + strings.ReplaceAll(e2id(), "-", "")[:12]
		c.StreamPrefix = c.BullMQPrefix // the integration streams: <prefix>:events
		c.SandboxMarketplaceAddr, c.SandboxAIAddr = "127.0.0.1:0", "127.0.0.1:0"
		c.JobAttempts = 3
	}}, opts...))
	ctx, cancel := context.WithCancel(context.Background())
	reg := listing.NewRegistry()
	queues := listing.NewQueues(e.Config)
	d, cleanupDispatch, err := listing.InitializeDispatch(ctx, e.Config, queues, reg, log)
	require.NoError(t, err)
	w, cleanupWork, err := listing.InitializeWork(ctx, e.Config, queues, reg, log)
	require.NoError(t, err)
	e.Work = w
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = d.Run(ctx) }()
	go func() { defer wg.Done(); _ = w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		cleanupWork()
		cleanupDispatch()
		// The queues and streams of this test's prefix go with it, from every node of a
		// cluster (the API's client is still open: its cleanup runs after this one).
		_ = redistest.DeleteKeys(context.Background(), e.API.Redis, e.Config.BullMQPrefix+":*")
	})
	return e
}

// ServiceConns bounds each pool of a service Start runs (DATABASE_MAX_CONNS).
const ServiceConns = 10

func e2id() string { return uuid.NewString() }

func start(t testing.TB, opts []Option) (*Env, *slog.Logger) {
	t.Helper()
	db := pgtest.New(t)
	cfg, err := config.Load()
	require.NoError(t, err)
	cfg.DatabaseURL = db.AppURL
	// Each of the service's pools (API, dispatch, work) holds at most ServiceConns: the
	// suite's connection budget (Makefile, TEST_FLAGS) counts on it.
	cfg.DatabaseMaxConns = ServiceConns
	if u := os.Getenv("REDIS_URL"); u != "" {
		cfg.RedisURL = u
	}
	cfg.AuthRatePerMinute = 1000
	cfg.StorageDir = t.TempDir()
	for _, o := range opts {
		o(&cfg)
	}
	logs := &SyncBuffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	// The public base URL must name the test server, which gets its port only once started.
	srv := httptest.NewUnstartedServer(nil)
	srv.Start()
	cfg.PublicBaseURL = srv.URL
	api, cleanup, err := listing.InitializeAPI(context.Background(), cfg, listing.Options{FastPasswordHashing: true}, listing.NewRegistry(), log)
	require.NoError(t, err)
	srv.Config.Handler = api.Server
	t.Cleanup(func() {
		srv.Close()
		cleanup()
	})
	return &Env{T: t, DB: db, Config: cfg, API: api, URL: srv.URL, logs: logs}, log
}

// WaitOperation polls an operation until it is finished (or fails the test after 30 s) and
// returns its JSON.
func (e *Env) WaitOperation(acct Account, operationID string) map[string]any {
	e.T.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp := e.Do(Request{Method: "GET", Path: "/v1/workspaces/" + acct.WorkspaceID + "/operations/" + operationID, Token: acct.AccessToken})
		require.Equal(e.T, http.StatusOK, resp.Status, "%s", resp.Body)
		op := resp.JSON(e.T)["operation"].(map[string]any)
		if s := op["status"]; s == "succeeded" || s == "failed" || s == "cancelled" {
			return op
		}
		if time.Now().After(deadline) {
			require.FailNow(e.T, "operation did not finish", "%v", op)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Logs returns everything the service logged so far.
func (e *Env) Logs() string { return e.logs.String() }

// Response is a completed HTTP exchange.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// Code returns the problem code of an error response ("" when there is none).
func (r Response) Code() string {
	var p struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &p)
	return p.Code
}

// Request describes one call. Body is sent as is when it is a string or []byte, else as JSON.
type Request struct {
	Method string
	Path   string
	Body   any
	Token  string
	Header map[string]string
}

// Do performs req against the service.
func (e *Env) Do(req Request) Response {
	e.T.Helper()
	var body io.Reader
	switch b := req.Body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	case []byte:
		body = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		require.NoError(e.T, err)
		body = bytes.NewReader(raw)
	}
	r, err := http.NewRequest(req.Method, e.URL+req.Path, body)
	require.NoError(e.T, err)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if req.Token != "" {
		r.Header.Set("Authorization", "Bearer "+req.Token)
	}
	for k, v := range req.Header {
		if v == "" {
			r.Header.Del(k)
			continue
		}
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	require.NoError(e.T, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(e.T, err)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: raw}
}

// Account is a registered user with a workspace and a session.
type Account struct {
	Email, Password           string
	UserID, WorkspaceID       string
	AccessToken, RefreshToken string
}

// Register creates an account with a fresh workspace.
func (e *Env) Register(email string) Account {
	e.T.Helper()
	pw := "correct horse battery staple"
	resp := e.Do(Request{Method: "POST", Path: "/v1/auth/register", Body: map[string]string{
		"email": email, "password": pw, "workspace_name": "Workspace of " + email,
	}})
	require.Equal(e.T, http.StatusCreated, resp.Status, "register: %s", resp.Body)
	m := resp.JSON(e.T)
	return Account{
		Email: email, Password: pw,
		UserID:       m["user"].(map[string]any)["id"].(string),
		WorkspaceID:  m["workspace"].(map[string]any)["id"].(string),
		AccessToken:  m["access_token"].(string),
		RefreshToken: m["refresh_token"].(string),
	}
}

// Count runs a count query as the owner (RLS does not apply): assertions only.
func (e *Env) Count(sql string, args ...any) int {
	e.T.Helper()
	var n int
	require.NoError(e.T, e.DB.Owner.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// SyncBuffer is a log buffer safe for concurrent writers (a runtime's logs, shown when a
// test fails).
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
