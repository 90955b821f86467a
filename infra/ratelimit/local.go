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
	key      string
	tokens   float64
	at       time.Time
	limit    domain.RateLimit // as taken: lowered while lowUntil is ahead
	lowUntil time.Time
}

var _ port.RateBuckets = (*Local)(nil)

// Take implements port.RateBuckets. A zero limit always takes.
func (l *Local) Take(_ context.Context, key string, limit domain.RateLimit, n int) (time.Duration, error) {
	if limit.IsZero() {
		return 0, nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bucketLocked(key, limit, now).take(now, limit, n), nil
}

// Lower implements port.RateBuckets.
func (l *Local) Lower(_ context.Context, key string, limit domain.RateLimit, d time.Duration) error {
	if limit.IsZero() {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.bucketLocked(key, limit, now)
	b.tokens, b.at, b.lowUntil, b.limit = 0, now, now.Add(d), limit.Lowered()
	return nil
}

func (l *Local) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// bucketLocked returns key's bucket, made full (limit) when there is none, evicting the
// least recently used one beyond MaxKeys.
func (l *Local) bucketLocked(key string, limit domain.RateLimit, now time.Time) *bucket {
	if l.buckets == nil {
		l.buckets = map[string]*list.Element{}
	}
	if e, ok := l.buckets[key]; ok {
		l.lru.MoveToFront(e)
		return e.Value.(*bucket)
	}
	if len(l.buckets) >= l.maxKeys() {
		oldest := l.lru.Back()
		l.lru.Remove(oldest)
		delete(l.buckets, oldest.Value.(*bucket).key)
	}
	b := &bucket{key: key, tokens: float64(limit.Burst), at: now, limit: limit}
	l.buckets[key] = l.lru.PushFront(b)
	return b
}

func (l *Local) maxKeys() int {
	if l.MaxKeys > 0 {
		return l.MaxKeys
	}
	return 100_000
}

// take refills b up to now at its own limit, adopts limit (lowered while b is; capping the
// tokens at its burst) and takes n tokens, or returns the wait for them.
func (b *bucket) take(now time.Time, limit domain.RateLimit, n int) time.Duration {
	if elapsed := now.Sub(b.at).Seconds(); elapsed > 0 {
		b.tokens = math.Min(b.tokens+elapsed*b.limit.PerSecond, float64(b.limit.Burst))
		b.at = now
	}
	if now.Before(b.lowUntil) {
		limit = limit.Lowered()
	}
	b.limit = limit
	b.tokens = math.Min(b.tokens, float64(limit.Burst))
	want := float64(min(max(n, 1), limit.Burst))
	if b.tokens >= want {
		b.tokens -= want
		return 0
	}
	return time.Duration(math.Ceil((want - b.tokens) / limit.PerSecond * float64(time.Second)))
}
