package ratelimit

import (
	"container/list"
	"context"
	"math"
	"sync"
	"time"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Local keeps token buckets in this process's memory. Each bucket keeps the limit of its own
// last take: the time since then refills at that limit, whatever limit another key's caller
// passes. At most MaxKeys buckets are kept: a new key beyond it evicts the least recently
// used bucket (in constant time) and is never refused; an evicted key that returns starts
// full again, so the cap is set far above the keys busy at once. Safe for concurrent use.
type Local struct {
	// MaxKeys bounds the buckets kept. Default 100000.
	MaxKeys int
	// Now is the clock. Default time.Now.
	Now func() time.Time

	mu      sync.Mutex
	buckets map[string]*list.Element // of *bucket
	lru     list.List                // front: most recently used
}

type bucket struct {
	key    string
	tokens float64
	at     time.Time
	limit  domain.RateLimit
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
		l.buckets = map[string]*list.Element{}
	}
	e, ok := l.buckets[key]
	if ok {
		l.lru.MoveToFront(e)
	} else {
		if len(l.buckets) >= l.maxKeys() {
			oldest := l.lru.Back()
			l.lru.Remove(oldest)
			delete(l.buckets, oldest.Value.(*bucket).key)
		}
		e = l.lru.PushFront(&bucket{key: key, tokens: float64(limit.Burst), at: now, limit: limit})
		l.buckets[key] = e
	}
	return e.Value.(*bucket).take(now, limit), nil
}

func (l *Local) maxKeys() int {
	if l.MaxKeys > 0 {
		return l.MaxKeys
	}
	return 100_000
}

// take refills b up to now at its own limit, adopts limit (capping the tokens at its burst)
// and takes a token, or returns the wait for one.
func (b *bucket) take(now time.Time, limit domain.RateLimit) time.Duration {
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.tokens+elapsed*b.limit.PerSecond, float64(b.limit.Burst))
		b.at = now
	}
	b.limit = limit
	b.tokens = math.Min(b.tokens, float64(limit.Burst))
	if b.tokens >= 1 {
		b.tokens--
		return 0
	}
	return time.Duration(math.Ceil((1 - b.tokens) / limit.PerSecond * float64(time.Second)))
}
