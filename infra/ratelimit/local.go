package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Local keeps token buckets in this process's memory. At most MaxKeys buckets are kept: when
// a new key would exceed it, the buckets that are full again (forgetting them changes
// nothing) are dropped, and if none is, the new key's take is refused for a second (never
// does an eviction hand out tokens a bucket did not have). Safe for concurrent use.
type Local struct {
	// MaxKeys bounds the buckets kept. Default 100000.
	MaxKeys int
	// Now is the clock. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

var _ port.RateBuckets = (*Local)(nil)

// Take implements port.RateBuckets. A zero limit always takes.
func (l *Local) Take(_ context.Context, key string, limit domain.RateLimit) (time.Duration, error) {
	if limit.IsZero() {
		return 0, nil
	}
	now := time.Now()
	if l.Now != nil {
		now = l.Now()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*bucket{}
	}
	b, ok := l.buckets[key]
	if !ok {
		if max := l.maxKeys(); len(l.buckets) >= max {
			l.dropFullLocked(now, limit)
			if len(l.buckets) >= max {
				return time.Second, nil
			}
		}
		b = &bucket{tokens: float64(limit.Burst), at: now}
		l.buckets[key] = b
	}
	return b.take(now, limit), nil
}

func (l *Local) maxKeys() int {
	if l.MaxKeys > 0 {
		return l.MaxKeys
	}
	return 100_000
}

// dropFullLocked forgets the buckets that have refilled to at least limit's burst by now.
func (l *Local) dropFullLocked(now time.Time, limit domain.RateLimit) {
	for k, b := range l.buckets {
		if b.tokens+now.Sub(b.at).Seconds()*limit.PerSecond >= float64(limit.Burst) {
			delete(l.buckets, k)
		}
	}
}

// take refills b up to now and takes a token, or returns the wait for one.
func (b *bucket) take(now time.Time, limit domain.RateLimit) time.Duration {
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.tokens += elapsed * limit.PerSecond
		b.at = now
	}
	b.tokens = math.Min(b.tokens, float64(limit.Burst))
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration(math.Ceil((1 - b.tokens) / limit.PerSecond * float64(time.Second)))
}
