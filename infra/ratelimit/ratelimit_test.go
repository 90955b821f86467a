package ratelimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/ratelimit"
	"github.com/listingkit/listing/internal/redistest"
)

// TestLocalBucket: a bucket starts full (burst), then gives PerSecond tokens a second; a
// refused take says how long until the next token and takes nothing; keys are apart.
func TestLocalBucket(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := &ratelimit.Local{Now: func() time.Time { return now }}
	ctx := context.Background()
	limit := domain.RateLimit{PerSecond: 10, Burst: 20}
	for i := range 20 {
		wait, err := l.Take(ctx, "a", limit)
		require.NoError(t, err)
		require.Zero(t, wait, "take %d of the burst", i)
	}
	wait, _ := l.Take(ctx, "a", limit)
	require.Equal(t, 100*time.Millisecond, wait)
	wait, _ = l.Take(ctx, "b", limit)
	require.Zero(t, wait, "another key has its own bucket")
	now = now.Add(250 * time.Millisecond)
	for range 2 {
		wait, _ = l.Take(ctx, "a", limit)
		require.Zero(t, wait)
	}
	wait, _ = l.Take(ctx, "a", limit)
	require.Equal(t, 50*time.Millisecond, wait, "half a token left")
	wait, _ = l.Take(ctx, "a", domain.RateLimit{})
	require.Zero(t, wait, "no limit")
}

// TestLocalBucketBoundsItsKeys: beyond MaxKeys only full buckets are forgotten; while none
// is, a new key waits.
func TestLocalBucketBoundsItsKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := &ratelimit.Local{MaxKeys: 2, Now: func() time.Time { return now }}
	ctx := context.Background()
	limit := domain.RateLimit{PerSecond: 1, Burst: 1}
	for _, k := range []string{"a", "b"} {
		wait, _ := l.Take(ctx, k, limit)
		require.Zero(t, wait)
	}
	wait, _ := l.Take(ctx, "c", limit)
	require.Positive(t, wait, "no room, and no bucket is full again")
	now = now.Add(time.Second)
	wait, _ = l.Take(ctx, "c", limit)
	require.Zero(t, wait, "full buckets forgotten")
	wait, _ = l.Take(ctx, "a", limit)
	require.Zero(t, wait, "a forgotten bucket was full: nothing gained")
}

// TestRedisBucketIsShared: two processes (two Redis values over one server) draw from one
// bucket: 20 takes of the burst between them, then about 10 a second.
func TestRedisBucketIsShared(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	prefix := "test:rate:" + uuid.NewString() + ":"
	t.Cleanup(func() { _ = rdb.Del(context.Background(), prefix+"store").Err() })
	a, b := ratelimit.Redis{Client: rdb, Prefix: prefix}, ratelimit.Redis{Client: rdb, Prefix: prefix}
	ctx := context.Background()
	limit := domain.RateLimit{PerSecond: 10, Burst: 20}
	taken := 0
	for i := range 40 {
		p := a
		if i%2 == 1 {
			p = b
		}
		wait, err := p.Take(ctx, "store", limit)
		require.NoError(t, err)
		if wait == 0 {
			taken++
		} else {
			require.LessOrEqual(t, wait, 100*time.Millisecond)
		}
	}
	require.GreaterOrEqual(t, taken, 20)
	require.LessOrEqual(t, taken, 22, "the burst, and what refilled while the takes ran")
	ttl, err := rdb.PTTL(ctx, prefix+"store").Result()
	require.NoError(t, err)
	require.Positive(t, ttl, "the bucket expires once it would be full again")
	require.LessOrEqual(t, ttl, 4*time.Second)
}
