package outbox

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"
)

var (
	// scheme://user:password@host → scheme://[redacted]@host
	reURLUserinfo = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]+@`)
	// Query strings of URLs carry presigned signatures and tokens: drop them whole.
	reURLQuery = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://[^\s?#"']*)\?[^\s"']*`)
	// Authorization schemes with their credentials.
	reBearer = regexp.MustCompile(`(?i)\b(bearer|basic|token)\s+[a-z0-9._~+/=-]+`)
	// key=value, key: value, "key":"value" where the key names a secret.
	reKeyValue = regexp.MustCompile(`(?i)("?[a-z0-9_.-]*(?:password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|credential|cookie|session|signature|authorization|auth)[a-z0-9_.-]*"?\s*[:=]\s*)("[^"]*"|'[^']*'|[^\s,;&}]+)`)
)

// SanitizeError turns an error into text fit for outbox_events.last_error and logs: URL
// credentials and query strings, Authorization values and key=value secrets are replaced by
// [redacted], control characters by spaces, and the result is cut to at most maxLen bytes
// (valid UTF-8).
func SanitizeError(err error, maxLen int) string {
	if err == nil {
		return ""
	}
	return SanitizeText(err.Error(), maxLen)
}

// SanitizeText is SanitizeError for a string.
func SanitizeText(s string, maxLen int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	s = reURLUserinfo.ReplaceAllString(s, "${1}[redacted]@")
	s = reURLQuery.ReplaceAllString(s, "${1}?[redacted]")
	s = reBearer.ReplaceAllString(s, "${1} [redacted]")
	s = reKeyValue.ReplaceAllString(s, "${1}[redacted]")
	if maxLen > 0 && len(s) > maxLen {
		cut := maxLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// backoff returns the delay before attempt number attempt+1, given that attempt attempts
// failed (attempt ≥ 1): base·2^(attempt-1) capped at max, with "equal jitter" (a uniformly
// random value in [d/2, d]) so that many events failing together do not retry in lockstep.
// RedeliveryWindow bounds how long after an event's first publication the outbox may publish
// it again, with the default backoff (DispatcherConfig.BackoffBase, BackoffMax): the longest
// backoff before each of maxAttempts attempts, summed, plus a lease per attempt (a publish
// that reached the queue but whose outcome was lost is retried when its lease expires, or
// after its backoff). A queue must keep deduplicating an event's job id at least this long.
func RedeliveryWindow(maxAttempts int, lease time.Duration) time.Duration {
	var c DispatcherConfig
	c.setDefaults()
	w, d := time.Duration(0), c.BackoffBase
	for range max(maxAttempts, 0) {
		w += min(d, c.BackoffMax) + lease
		if d < c.BackoffMax {
			d *= 2
		}
	}
	return w
}

func backoff(base, max time.Duration, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := float64(base) * math.Pow(2, float64(attempt-1))
	if d > float64(max) || math.IsInf(d, 0) {
		d = float64(max)
	}
	half := d / 2
	return time.Duration(half + rand.Float64()*half)
}
