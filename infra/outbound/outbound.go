// Package outbound holds what the HTTP adapters of external systems (infra/platform,
// infra/ai) share about reading their answers safely: text that may be quoted in an error,
// and Retry-After.
package outbound

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sanitize makes s safe to quote in an error: printable ASCII only, at most max bytes, the
// secret masked, and withheld entirely when any 8-byte window of the secret survives (a
// truncated or re-encoded echo of it).
func Sanitize(s string, max int, secret string) string {
	if secret != "" {
		s = strings.ReplaceAll(s, secret, "[REDACTED]")
	}
	var b strings.Builder
	for _, r := range s {
		if r >= 0x20 && r < 0x7f {
			b.WriteRune(r)
		} else {
			b.WriteByte(' ')
		}
		if b.Len() >= max {
			break
		}
	}
	out := strings.TrimSpace(b.String())
	for i := 0; len(secret) >= 8 && i+8 <= len(secret); i++ {
		if strings.Contains(out, secret[i:i+8]) {
			return "[withheld]"
		}
	}
	return out
}

// RetryAfter reads a Retry-After header (seconds or an HTTP date) as a wait of at least one
// second and at most maxWait; a missing or unreadable value is one second.
func RetryAfter(v string, now time.Time, maxWait time.Duration) time.Duration {
	d := time.Second
	if v = strings.TrimSpace(v); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			d = time.Duration(n) * time.Second
		} else if t, err := http.ParseTime(v); err == nil {
			d = t.Sub(now)
		}
	}
	return min(max(d, time.Second), maxWait)
}
