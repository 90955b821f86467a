package ai

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/infra/outbound"
	"github.com/listingkit/listing/infra/tracing"
)

// Config configures New.
type Config struct {
	// BaseURL of the provider, AI_BASE_URL, e.g. "https://api.openai.com" (a trailing "/v1" is
	// accepted and not doubled). Required: cmd/app passes the AI sandbox's URL when unset.
	BaseURL string
	// APIKey is AI_API_KEY, sent as the bearer token. Required (the sandbox accepts any).
	APIKey string
	// TextModel is the default chat model, AI_TEXT_MODEL. Default "gpt-4o-mini".
	TextModel string
	// ImageModel is the image model, AI_IMAGE_MODEL. Default "gpt-image-1".
	ImageModel string
	// ImageSize requested, AI_IMAGE_SIZE. Default "1024x1024".
	ImageSize string
	// ImageResponseFormat is sent as response_format when set. Default "" (omitted; GPT image
	// models always return b64_json), or "b64_json" when ImageModel starts with "dall-e".
	ImageResponseFormat string
	// Timeout bounds each call. Default 120s (cmd/app passes AI_TIMEOUT, default 60s).
	Timeout time.Duration
	// MaxRetryAfter caps a provider's Retry-After. Default 10m.
	MaxRetryAfter time.Duration
	// MaxImageBytes bounds a decoded image. Default 32 MiB.
	MaxImageBytes int
	// HTTPClient sends the requests. Default: a client with its own transport.
	HTTPClient *http.Client
	// UserAgent header. Default "listing-ai/1".
	UserAgent string
	// Logger gets one debug line per call (op, status, duration; never prompts). Default
	// slog.Default().
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.TextModel == "" {
		c.TextModel = "gpt-4o-mini"
	}
	if c.ImageModel == "" {
		c.ImageModel = "gpt-image-1"
	}
	if c.ImageSize == "" {
		c.ImageSize = "1024x1024"
	}
	if c.ImageResponseFormat == "" && strings.HasPrefix(c.ImageModel, "dall-e") {
		c.ImageResponseFormat = "b64_json"
	}
	if c.Timeout == 0 {
		c.Timeout = 120 * time.Second
	}
	if c.MaxRetryAfter == 0 {
		c.MaxRetryAfter = 10 * time.Minute
	}
	if c.MaxImageBytes == 0 {
		c.MaxImageBytes = 32 << 20
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{Transport: tracing.Transport(http.DefaultTransport.(*http.Transport).Clone())}
	}
	if c.UserAgent == "" {
		c.UserAgent = "listing-ai/1"
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first invalid field without changing c. It never quotes the key.
func (c Config) Validate() error {
	u, err := url.Parse(c.BaseURL)
	if c.BaseURL == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return errors.New("ai: BaseURL (AI_BASE_URL) must be an absolute http(s) URL without user info")
	}
	if c.APIKey == "" {
		return errors.New("ai: APIKey (AI_API_KEY) is required")
	}
	if strings.ContainsAny(c.APIKey, " \t\r\n") {
		return errors.New("ai: APIKey (AI_API_KEY) must not contain white space")
	}
	if c.Timeout < 0 || c.MaxRetryAfter < 0 || c.MaxImageBytes < 0 {
		return errors.New("ai: Timeout, MaxRetryAfter and MaxImageBytes must not be negative")
	}
	return nil
}

// Client is the provider adapter. Safe for concurrent use.
type Client struct {
	cfg  Config
	base string
}

var _ port.AIProvider = (*Client)(nil)

// New returns a Client.
func New(cfg Config) (*Client, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("ai.New: %w", err)
	}
	base := strings.TrimSuffix(strings.TrimRight(cfg.BaseURL, "/"), "/v1")
	return &Client{cfg: cfg, base: base}, nil
}

// CompleteText implements port.AIProvider.
func (c *Client) CompleteText(ctx context.Context, idempotencyKey, model, prompt string) (port.AIResult, error) {
	const op = "ai.CompleteText"
	if model == "" {
		model = c.cfg.TextModel
	}
	req := map[string]any{
		"model":    model,
		"messages": []map[string]string{{"role": "user", "content": prompt}},
	}
	var out struct {
		ID      string `json:"id"`
		Model   string `json:"model"`
		Choices []struct {
			Message struct {
				Content string `json:"content"`
			} `json:"message"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	}
	reqID, err := c.do(ctx, op, "/v1/chat/completions", idempotencyKey, req, &out, 8<<20)
	if err != nil {
		return port.AIResult{}, err
	}
	if len(out.Choices) == 0 {
		return port.AIResult{}, fmt.Errorf("%s: response has no choices: %w", op, port.ErrAITransient)
	}
	id := out.ID
	if id == "" {
		id = reqID
	}
	if out.Model == "" {
		out.Model = model
	}
	return port.AIResult{
		Output:            out.Choices[0].Message.Content,
		Usage:             port.Usage{PromptTokens: out.Usage.PromptTokens, CompletionTokens: out.Usage.CompletionTokens},
		Model:             out.Model,
		ProviderRequestID: id,
	}, nil
}

// GenerateImage implements port.AIProvider.
func (c *Client) GenerateImage(ctx context.Context, idempotencyKey, prompt string) (port.ImageResult, error) {
	const op = "ai.GenerateImage"
	req := map[string]any{"model": c.cfg.ImageModel, "prompt": prompt, "n": 1, "size": c.cfg.ImageSize}
	if c.cfg.ImageResponseFormat != "" {
		req["response_format"] = c.cfg.ImageResponseFormat
	}
	var out struct {
		Data []struct {
			B64JSON       string `json:"b64_json"`
			URL           string `json:"url"`
			RevisedPrompt string `json:"revised_prompt"`
		} `json:"data"`
		Usage struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
	limit := int64(c.cfg.MaxImageBytes)*4/3 + 1<<20
	reqID, err := c.do(ctx, op, "/v1/images/generations", idempotencyKey, req, &out, limit)
	if err != nil {
		return port.ImageResult{}, err
	}
	if len(out.Data) == 0 {
		return port.ImageResult{}, fmt.Errorf("%s: response has no image: %w", op, port.ErrAITransient)
	}
	d := out.Data[0]
	if d.B64JSON == "" {
		return port.ImageResult{}, fmt.Errorf("%s: provider returned no b64_json image (set ImageResponseFormat=b64_json): %w", op, port.ErrAIRejected)
	}
	img, err := base64.StdEncoding.DecodeString(d.B64JSON)
	if err != nil {
		return port.ImageResult{}, fmt.Errorf("%s: image is not base64: %w", op, port.ErrAITransient)
	}
	if len(img) > c.cfg.MaxImageBytes {
		return port.ImageResult{}, fmt.Errorf("%s: image larger than %d bytes: %w", op, c.cfg.MaxImageBytes, port.ErrAIRejected)
	}
	return port.ImageResult{
		Image:             img,
		ContentType:       http.DetectContentType(img),
		RevisedPrompt:     d.RevisedPrompt,
		Usage:             port.Usage{PromptTokens: out.Usage.InputTokens, CompletionTokens: out.Usage.OutputTokens, Images: len(out.Data)},
		Model:             c.cfg.ImageModel,
		ProviderRequestID: reqID,
	}, nil
}

// do posts in as JSON and decodes a 2xx body into out. It returns the x-request-id header.
func (c *Client) do(ctx context.Context, op, path, idemKey string, in, out any, maxBody int64) (reqID string, err error) {
	start := time.Now()
	status := 0
	defer func() {
		attrs := []any{slog.String("op", op), slog.String("path", path), slog.Int("status", status),
			slog.Duration("duration", time.Since(start))}
		if err != nil {
			attrs = append(attrs, slog.String("error", err.Error()))
		}
		c.cfg.Logger.DebugContext(ctx, "ai call", attrs...)
	}()
	if idemKey == "" {
		return "", fmt.Errorf("%s: an idempotency key is required: %w", op, port.ErrAIRejected)
	}
	raw, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("%s: encode request: %w", op, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+path, bytes.NewReader(raw))
	if err != nil {
		return "", fmt.Errorf("%s: build request: %w", op, port.ErrAIRejected)
	}
	req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req.Header.Set("Idempotency-Key", idemKey)

	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("%s: %w", op, port.ErrAITransient.WithCause(transportCause(err)))
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	reqID = resp.Header.Get("X-Request-Id")
	body, readErr := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))

	switch {
	case status >= 200 && status < 300:
		if readErr != nil {
			return "", fmt.Errorf("%s: read response: %w", op, port.ErrAITransient.WithCause(transportCause(readErr)))
		}
		if int64(len(body)) > maxBody {
			return "", fmt.Errorf("%s: response larger than %d bytes: %w", op, maxBody, port.ErrAIRejected)
		}
		if err := json.Unmarshal(body, out); err != nil {
			return "", fmt.Errorf("%s: HTTP %d with an unreadable body: %w", op, status, port.ErrAITransient)
		}
		return reqID, nil
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return "", fmt.Errorf("%s: HTTP %d%s: %w", op, status, c.snippet(body), port.ErrAIUnauthorized)
	case status == http.StatusTooManyRequests:
		if errorCode(body) == "insufficient_quota" {
			return "", fmt.Errorf("%s: HTTP 429 (insufficient_quota): %w", op, port.ErrAIRejected)
		}
		ra := outbound.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), c.cfg.MaxRetryAfter)
		return "", fmt.Errorf("%s: HTTP 429: %w", op, &port.RateLimitedError{Service: "ai", RetryAfter: ra, Sentinel: port.ErrAIRateLimited})
	case status == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") != "":
		ra := outbound.RetryAfter(resp.Header.Get("Retry-After"), time.Now(), c.cfg.MaxRetryAfter)
		return "", fmt.Errorf("%s: HTTP 503%s: %w", op, c.snippet(body), port.ErrAITransient.WithRetryAfter(ra))
	case status == http.StatusRequestTimeout || status >= 500:
		return "", fmt.Errorf("%s: HTTP %d%s: %w", op, status, c.snippet(body), port.ErrAITransient)
	default:
		return "", fmt.Errorf("%s: HTTP %d%s: %w", op, status, c.snippet(body), port.ErrAIRejected)
	}
}

type apiError struct {
	Error struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	} `json:"error"`
}

func errorCode(body []byte) string {
	var e apiError
	if json.Unmarshal(body, &e) != nil || e.Error.Code == nil {
		return ""
	}
	return fmt.Sprint(e.Error.Code)
}

// snippet is " (type/code: message)" from an OpenAI error body, bounded and sanitized, with
// the key masked.
func (c *Client) snippet(body []byte) string {
	var e apiError
	var text string
	if json.Unmarshal(body, &e) == nil && (e.Error.Type != "" || e.Error.Message != "") {
		text = e.Error.Type
		if code := errorCode(body); code != "" {
			text += "/" + code
		}
		if e.Error.Message != "" {
			text += ": " + e.Error.Message
		}
	} else if len(body) > 0 {
		text = string(body[:min(len(body), 120)])
	}
	s := outbound.Sanitize(text, 200, c.cfg.APIKey)
	if s == "" {
		return ""
	}
	return " (" + s + ")"
}

func transportCause(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if ue.Timeout() {
			return fmt.Errorf("timeout: %w", ue.Err)
		}
		return ue.Err
	}
	return err
}
