package idem

import (
	"errors"
	"fmt"
	"net/textproto"
	"time"
)

// Defaults and bounds of Config.
const (
	// DefaultRetention is how long records are kept.
	DefaultRetention = 48 * time.Hour
	// MinRetention is the shortest retention allowed: a client may retry for a day.
	MinRetention = 24 * time.Hour
	// DefaultMaxResponseBytes bounds a stored response (body plus headers).
	DefaultMaxResponseBytes = 64 << 10
	// DefaultRetryAfter is the Retry-After of IDEMPOTENCY_REQUEST_IN_PROGRESS.
	DefaultRetryAfter = time.Second
)

// DefaultStoredHeaders are the response headers kept in a record and replayed.
var DefaultStoredHeaders = []string{"Content-Type", "Location", "ETag", "Content-Location", "Last-Modified", "Content-Language"}

// Config configures the idempotency middleware (New, Middleware).
type Config struct {
	// Keys are the fingerprint secrets, current first (ParseKeys parses FINGERPRINT_KEYS).
	// Required. Keep a retired key configured at least Retention after it stopped being
	// current, or its records can no longer be verified.
	Keys []Key
	// Retention is how long a record lives: expires_at = now() + Retention. Default 48h; less
	// than 24h is refused.
	Retention time.Duration
	// MaxResponseBytes bounds the stored response (body plus header names and values).
	// A larger response fails the request with IDEMPOTENCY_RESPONSE_TOO_LARGE and rolls back:
	// a truncated body is never stored. Default 64 KiB.
	MaxResponseBytes int
	// RetryAfter is what IDEMPOTENCY_REQUEST_IN_PROGRESS tells the client. Default 1s.
	RetryAfter time.Duration
	// StoredHeaders are the response headers kept and replayed (canonical names). Any other
	// header the RenderFunc returns is dropped from the response, so that the first answer and
	// every replay carry the same headers. Default DefaultStoredHeaders.
	StoredHeaders []string
	// Metrics receives the counters. Optional.
	Metrics *Metrics
}

func (c *Config) setDefaults() {
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.MaxResponseBytes == 0 {
		c.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = DefaultRetryAfter
	}
	if c.StoredHeaders == nil {
		c.StoredHeaders = append([]string(nil), DefaultStoredHeaders...)
	}
}

// Validate reports what is wrong with c, after defaults. It does not change c.
func (c Config) Validate() error {
	var errs []error
	if err := validateKeys(c.Keys); err != nil {
		errs = append(errs, err)
	}
	if c.Retention < MinRetention {
		errs = append(errs, fmt.Errorf("retention %s is shorter than the minimum %s", c.Retention, MinRetention))
	}
	if c.MaxResponseBytes <= 0 {
		errs = append(errs, errors.New("max response bytes must be positive"))
	}
	if c.RetryAfter < 0 {
		errs = append(errs, errors.New("retry-after must not be negative"))
	}
	for _, h := range c.StoredHeaders {
		if h == "" || textproto.CanonicalMIMEHeaderKey(h) == "" {
			errs = append(errs, fmt.Errorf("stored header %q is not a header name", h))
		}
	}
	return errors.Join(errs...)
}

// CleanerConfig configures the Cleaner.
type CleanerConfig struct {
	// BatchSize is how many records one transaction deletes at most. Default 1000.
	BatchSize int
	// WorkspacesPerRound is how many workspaces one discovery call returns at most.
	// Default 100.
	WorkspacesPerRound int
	// Metrics receives the deleted count. Optional.
	Metrics *Metrics
}

func (c *CleanerConfig) setDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = 1000
	}
	if c.WorkspacesPerRound == 0 {
		c.WorkspacesPerRound = 100
	}
}

// Validate reports what is wrong with c, after defaults. It does not change c.
func (c CleanerConfig) Validate() error {
	var errs []error
	if c.BatchSize <= 0 || c.BatchSize > 100000 {
		errs = append(errs, errors.New("batch size must be between 1 and 100000"))
	}
	if c.WorkspacesPerRound <= 0 || c.WorkspacesPerRound > 10000 {
		errs = append(errs, errors.New("workspaces per round must be between 1 and 10000"))
	}
	return errors.Join(errs...)
}
