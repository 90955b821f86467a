package ai_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/ai"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
)

const aiKey = "sk-ai-CANARY-0123456789abcdef"

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type bundle struct {
	sb     *aiprovider.Sandbox
	srv    *httptest.Server
	client *ai.Client
	logs   *syncBuffer
	mu     sync.Mutex
	idem   []string
}

func setup(t *testing.T, mut ...func(*ai.Config)) *bundle {
	t.Helper()
	b := &bundle{logs: &syncBuffer{}}
	logger := slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	sb, err := aiprovider.New(aiprovider.Config{APIKeys: []string{aiKey}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	b.sb = sb
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.idem = append(b.idem, r.Header.Get("Idempotency-Key"))
		b.mu.Unlock()
		sb.ServeHTTP(w, r)
	}))
	t.Cleanup(b.srv.Close)
	cfg := ai.Config{BaseURL: b.srv.URL + "/v1/", APIKey: aiKey, Logger: logger, Timeout: 2 * time.Second}
	for _, m := range mut {
		m(&cfg)
	}
	b.client, err = ai.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCompleteTextRoundTrip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.CompleteText(ctx, "task-1", "", "Write a title for a blue mug")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Output, "blue mug") || res.Model != "gpt-4o-mini" || res.ProviderRequestID == "" {
		t.Fatalf("result %+v", res)
	}
	if res.Usage.PromptTokens <= 0 || res.Usage.CompletionTokens <= 0 || res.Usage.Images != 0 {
		t.Fatalf("usage %+v", res.Usage)
	}
	again, err := b.client.CompleteText(ctx, "task-1", "", "Write a title for a blue mug")
	if err != nil || again != res {
		t.Fatalf("replay differs: %+v vs %+v (%v)", again, res, err)
	}
	if b.sb.Calls(aiprovider.EndpointChat) != 2 || b.sb.Executions(aiprovider.EndpointChat) != 1 {
		t.Fatalf("calls %d executions %d", b.sb.Calls(aiprovider.EndpointChat), b.sb.Executions(aiprovider.EndpointChat))
	}
	other, err := b.client.CompleteText(ctx, "task-2", "gpt-x", "Write a title for a blue mug")
	if err != nil || other.ProviderRequestID == res.ProviderRequestID || other.Model != "gpt-x" {
		t.Fatalf("other task: %+v %v", other, err)
	}
	if _, err := b.client.CompleteText(ctx, "task-1", "", "another prompt"); !errors.Is(err, port.ErrAIRejected) {
		t.Fatalf("key reused with another prompt: %v", err)
	}
	if _, err := b.client.CompleteText(ctx, "", "", "p"); !errors.Is(err, port.ErrAIRejected) {
		t.Fatalf("no key: %v", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.idem[0] != "task-1" || b.idem[2] != "task-2" {
		t.Fatalf("Idempotency-Key headers %v", b.idem)
	}
}

func TestGenerateImageRoundTrip(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	res, err := b.client.GenerateImage(ctx, "img-1", "a red mug")
	if err != nil {
		t.Fatal(err)
	}
	if res.ContentType != "image/png" || len(res.Image) < 50 || res.Usage.Images != 1 || res.Usage.PromptTokens == 0 || res.ProviderRequestID == "" {
		t.Fatalf("result %+v", res.Usage)
	}
	again, err := b.client.GenerateImage(ctx, "img-1", "a red mug")
	if err != nil || !bytes.Equal(again.Image, res.Image) || again.ProviderRequestID != res.ProviderRequestID {
		t.Fatalf("replay differs: %v", err)
	}
	if st := b.sb.Stats(); st.ImagesBilled != 1 || st.Replays != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestErrorMapping(t *testing.T) {
	ctx := context.Background()
	t.Run("401", func(t *testing.T) {
		b := setup(t, func(c *ai.Config) { c.APIKey = "sk-wrong-key-123456" })
		_, err := b.client.CompleteText(ctx, "k", "", "p")
		if !errors.Is(err, port.ErrAIUnauthorized) || !port.IsPermanent(err) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("429", func(t *testing.T) {
		b := setup(t)
		b.sb.InjectFault(sandbox.Fault{Status: 429, RetryAfter: 3 * time.Second})
		_, err := b.client.GenerateImage(ctx, "k", "p")
		var rl *port.RateLimitedError
		if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second || !errors.Is(err, port.ErrAIRateLimited) {
			t.Fatalf("err = %v", err)
		}
		if b.sb.Executions(aiprovider.EndpointImages) != 0 {
			t.Fatal("rate-limited call executed")
		}
	})
	t.Run("5xx after effect, retry replays", func(t *testing.T) {
		b := setup(t)
		b.sb.InjectFault(sandbox.Fault{Endpoint: aiprovider.EndpointChat, Status: 502, AfterEffect: true})
		if _, err := b.client.CompleteText(ctx, "task-9", "", "p"); !errors.Is(err, port.ErrAITransient) {
			t.Fatalf("err = %v", err)
		}
		if _, err := b.client.CompleteText(ctx, "task-9", "", "p"); err != nil {
			t.Fatal(err)
		}
		if b.sb.Executions(aiprovider.EndpointChat) != 1 {
			t.Fatalf("executions = %d, want 1 (billed once)", b.sb.Executions(aiprovider.EndpointChat))
		}
	})
	t.Run("timeout", func(t *testing.T) {
		b := setup(t, func(c *ai.Config) { c.Timeout = 100 * time.Millisecond })
		b.sb.SetLatency(2 * time.Second)
		start := time.Now()
		if _, err := b.client.CompleteText(ctx, "k", "", "p"); !errors.Is(err, port.ErrAITransient) || time.Since(start) > time.Second {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("insufficient quota is permanent", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(429)
			_, _ = io.WriteString(w, `{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","code":"insufficient_quota"}}`)
		}))
		defer srv.Close()
		c, _ := ai.New(ai.Config{BaseURL: srv.URL, APIKey: aiKey})
		if _, err := c.CompleteText(ctx, "k", "", "p"); !errors.Is(err, port.ErrAIRejected) {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("400 rejected", func(t *testing.T) {
		b := setup(t)
		if _, err := b.client.GenerateImage(ctx, "k", ""); !errors.Is(err, port.ErrAIRejected) || !strings.Contains(err.Error(), "prompt is required") {
			t.Fatalf("err = %v", err)
		}
	})
}

func TestKeyNeverLeaks(t *testing.T) {
	b := setup(t, func(c *ai.Config) { c.Timeout = 200 * time.Millisecond })
	ctx := context.Background()
	var errs []error
	for i, st := range []int{0, 500, 429, 503} {
		if st != 0 {
			b.sb.InjectFault(sandbox.Fault{Status: st, Count: 2})
		}
		key := string(rune('a' + i))
		if _, err := b.client.CompleteText(ctx, key, "", "p"); err != nil {
			errs = append(errs, err)
		}
		if _, err := b.client.GenerateImage(ctx, key, "p"); err != nil {
			errs = append(errs, err)
		}
	}
	b.sb.SetLatency(time.Second)
	if _, err := b.client.CompleteText(ctx, "slow", "", "p"); err != nil {
		errs = append(errs, err)
	}
	echo := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","message":"bad key `+r.Header.Get("Authorization")+`"}}`)
	}))
	defer echo.Close()
	hostile, _ := ai.New(ai.Config{BaseURL: echo.URL, APIKey: aiKey, Logger: slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if _, err := hostile.CompleteText(ctx, "k", "", "p"); err != nil {
		errs = append(errs, err)
	}
	if len(errs) < 7 {
		t.Fatalf("expected errors, got %d", len(errs))
	}
	for _, err := range errs {
		if strings.Contains(err.Error(), "CANARY") {
			t.Errorf("error leaks the key: %v", err)
		}
	}
	if logs := b.logs.String(); strings.Contains(logs, "CANARY") || !strings.Contains(logs, "ai call") {
		t.Errorf("logs leak the key or are missing:\n%s", logs)
	}
	if _, err := ai.New(ai.Config{BaseURL: "http://x", APIKey: "has space CANARY"}); err == nil || strings.Contains(err.Error(), "CANARY") {
		t.Errorf("config error: %v", err)
	}
}
