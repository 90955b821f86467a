package domain

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// RateLimit is a token bucket's budget: PerSecond tokens are added each second, up to Burst
// held at once; each request takes one. The zero RateLimit means no limit.
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// IsZero reports whether r sets no limit.
func (r RateLimit) IsZero() bool { return r.PerSecond == 0 && r.Burst == 0 }

// Validate reports a limit that is not the zero RateLimit and whose rate is not positive or
// whose burst is below 1.
func (r RateLimit) Validate() error {
	if r.IsZero() {
		return nil
	}
	if !(r.PerSecond > 0) || math.IsInf(r.PerSecond, 0) || r.PerSecond > 1e6 {
		return errors.New("per_second must be a positive number (at most 1000000)")
	}
	if r.Burst < 1 || r.Burst > 1_000_000 {
		return errors.New("burst must be between 1 and 1000000")
	}
	return nil
}

// Lowered is r while an upstream's 429 lowers it (port.RateBuckets.Lower): half the rate and
// half the burst, the burst at least 1.
func (r RateLimit) Lowered() RateLimit {
	if r.IsZero() {
		return r
	}
	return RateLimit{PerSecond: r.PerSecond / 2, Burst: max(1, r.Burst/2)}
}

// String renders r in the form ParseRateLimit reads ("" for no limit).
func (r RateLimit) String() string {
	if r.IsZero() {
		return ""
	}
	return strconv.FormatFloat(r.PerSecond, 'f', -1, 64) + "/" + strconv.Itoa(r.Burst)
}

// ParseRateLimit reads "<per second>/<burst>" (e.g. "10/20"); "<per second>" alone takes a
// burst of the rate rounded up (at least 1); "" is no limit.
func ParseRateLimit(s string) (RateLimit, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return RateLimit{}, nil
	}
	rate, burst, hasBurst := strings.Cut(s, "/")
	var r RateLimit
	var err error
	if r.PerSecond, err = strconv.ParseFloat(strings.TrimSpace(rate), 64); err != nil {
		return RateLimit{}, fmt.Errorf("rate limit %q: want <per second>/<burst>, e.g. 10/20", s)
	}
	r.Burst = int(math.Max(1, math.Ceil(r.PerSecond)))
	if hasBurst {
		if r.Burst, err = strconv.Atoi(strings.TrimSpace(burst)); err != nil {
			return RateLimit{}, fmt.Errorf("rate limit %q: want <per second>/<burst>, e.g. 10/20", s)
		}
	}
	if err := r.Validate(); err != nil {
		return RateLimit{}, fmt.Errorf("rate limit %q: %w", s, err)
	}
	return r, nil
}

// UnmarshalText reads the form of ParseRateLimit (configuration).
func (r *RateLimit) UnmarshalText(text []byte) error {
	v, err := ParseRateLimit(string(text))
	if err != nil {
		return err
	}
	*r = v
	return nil
}
