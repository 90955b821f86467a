package aiprovider_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"image/png"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/listingkit/listing/infra/sandbox/aiprovider"
)

func post(t *testing.T, url, key, idem, body string) (int, http.Header, []byte) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if idem != "" {
		req.Header.Set("Idempotency-Key", idem)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, raw
}

func TestSandboxProtocol(t *testing.T) {
	var logs bytes.Buffer
	sb, _ := aiprovider.New(aiprovider.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	srv := httptest.NewServer(sb)
	defer srv.Close()
	key := "sk-AICANARY"
	chat := `{"model":"m","messages":[{"role":"user","content":"hello there"}]}`

	if st, _, _ := post(t, srv.URL+"/v1/chat/completions", "", "", chat); st != 401 {
		t.Fatalf("no key: %d", st)
	}
	st, h, first := post(t, srv.URL+"/v1/chat/completions", key, "t1", chat)
	if st != 200 || h.Get("X-Request-Id") == "" {
		t.Fatalf("chat: %d %s", st, first)
	}
	var resp struct {
		ID      string `json:"id"`
		Choices []struct {
			Message struct{ Content string } `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens, CompletionTokens int
		} `json:"usage"`
	}
	if err := json.Unmarshal(first, &resp); err != nil || resp.Choices[0].Message.Content != "Sandbox reply (m): hello there" {
		t.Fatalf("chat body %s", first)
	}
	_, h2, second := post(t, srv.URL+"/v1/chat/completions", key, "t1", chat)
	if !bytes.Equal(first, second) || h2.Get("Idempotent-Replayed") != "true" {
		t.Fatal("replay differs")
	}
	if st, _, _ := post(t, srv.URL+"/v1/chat/completions", key, "t1", `{"model":"m","messages":[{"role":"user","content":"other"}]}`); st != 409 {
		t.Fatalf("reused key: %d", st)
	}
	st, _, img := post(t, srv.URL+"/v1/images/generations", key, "i1", `{"prompt":"a cat","n":2}`)
	var ir struct {
		Data []struct {
			B64 string `json:"b64_json"`
		} `json:"data"`
	}
	if st != 200 || json.Unmarshal(img, &ir) != nil || len(ir.Data) != 2 {
		t.Fatalf("images: %d %s", st, img)
	}
	raw, _ := base64.StdEncoding.DecodeString(ir.Data[0].B64)
	if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	st2, _, img2 := post(t, srv.URL+"/v1/images/generations", key, "i2", `{"prompt":"a cat","n":2}`)
	var ir2 struct {
		Data []struct {
			B64 string `json:"b64_json"`
		} `json:"data"`
	}
	if st2 != 200 || json.Unmarshal(img2, &ir2) != nil || ir2.Data[0].B64 != ir.Data[0].B64 {
		t.Fatal("images are not deterministic for the same prompt")
	}
	s := sb.Stats()
	if s.Calls[aiprovider.EndpointChat] != 4 || s.Executions[aiprovider.EndpointChat] != 1 || s.Executions[aiprovider.EndpointImages] != 2 || s.ImagesBilled != 4 || s.Replays != 1 {
		t.Fatalf("stats %+v", s)
	}
	req, err := http.Get(srv.URL + "/_sandbox/stats")
	if err != nil {
		t.Fatal(err)
	}
	defer req.Body.Close()
	if req.StatusCode != 200 {
		t.Fatalf("stats endpoint %d", req.StatusCode)
	}
	if strings.Contains(logs.String(), "AICANARY") || strings.Contains(logs.String(), "hello there") || !strings.Contains(logs.String(), "ai sandbox call") {
		t.Fatalf("logs leak or missing:\n%s", logs.String())
	}
}
