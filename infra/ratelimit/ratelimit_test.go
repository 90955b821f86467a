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
		wait, err := l.Take(ctx, "a", limit, 1)
		require.NoError(t, err)
		require.Zero(t, wait, "take %d of the burst", i)
	}
	wait, _ := l.Take(ctx, "a", limit, 1)
	require.Equal(t, 100*time.Millisecond, wait)
	wait, _ = l.Take(ctx, "b", limit, 1)
	require.Zero(t, wait, "another key has its own bucket")
	now = now.Add(250 * time.Millisecond)
	for range 2 {
		wait, _ = l.Take(ctx, "a", limit, 1)
		require.Zero(t, wait)
	}
	wait, _ = l.Take(ctx, "a", limit, 1)
	require.Equal(t, 50*time.Millisecond, wait, "half a token left")
	wait, _ = l.Take(ctx, "a", domain.RateLimit{}, 1)
	require.Zero(t, wait, "no limit")
}

// TestLocalBucketBoundsItsKeys: beyond MaxKeys the least recently used bucket is evicted and
// the new key takes at once: many busy keys (one workspace's) never make another key wait
// for its first token.
func TestLocalBucketBoundsItsKeys(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := &ratelimit.Local{MaxKeys: 2, Now: func() time.Time { return now }}
	ctx := context.Background()
	limit := domain.RateLimit{PerSecond: 1, Burst: 1}
	for _, k := range []string{"a", "b"} {
		wait, _ := l.Take(ctx, k, limit, 1)
		require.Zero(t, wait)
	}
	wait, _ := l.Take(ctx, "b", limit, 1)
	require.Positive(t, wait, "b is empty and now the most recently used")
	wait, _ = l.Take(ctx, "c", limit, 1)
	require.Zero(t, wait, "a new key is never refused, though no bucket is full again")
	wait, _ = l.Take(ctx, "b", limit, 1)
	require.Positive(t, wait, "b was used more recently than a: kept, still empty")
	wait, _ = l.Take(ctx, "a", limit, 1)
	require.Zero(t, wait, "a, the least recently used, was evicted and starts full")
}

// TestLocalBucketKeepsItsOwnLimit: the time since a bucket's last take refills at that
// take's limit (the one in force meanwhile), not at the limit of the take that comes next.
func TestLocalBucketKeepsItsOwnLimit(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	l := &ratelimit.Local{Now: func() time.Time { return now }}
	ctx := context.Background()
	slow := domain.RateLimit{PerSecond: 1, Burst: 1}
	fast := domain.RateLimit{PerSecond: 1000, Burst: 1000}
	wait, _ := l.Take(ctx, "k", slow, 1)
	require.Zero(t, wait)
	now = now.Add(500 * time.Millisecond)
	wait, _ = l.Take(ctx, "k", fast, 1)
	require.Equal(t, 500*time.Microsecond, wait, "half a token refilled at 1/s; the rest comes at 1000/s")
	now = now.Add(time.Millisecond)
	wait, _ = l.Take(ctx, "k", fast, 1)
	require.Zero(t, wait)
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
		wait, err := p.Take(ctx, "store", limit, 1)
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

// TestLowerHalvesAndEmpties: Lower empties the bucket and halves the limit for its time
// (Local and Redis alike); a take of n tokens takes them all or none.
func TestLowerHalvesAndEmpties(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	limit := domain.RateLimit{PerSecond: 1000, Burst: 4}
	now := time.Unix(1_000_000, 0)
	l := &ratelimit.Local{Now: func() time.Time { return now }}
	wait, _ := l.Take(ctx, "k", limit, 3)
	require.Zero(t, wait)
	wait, _ = l.Take(ctx, "k", limit, 2)
	require.Equal(t, time.Millisecond, wait, "one token left of the two wanted")
	require.NoError(t, l.Lower(ctx, "k", limit, time.Second))
	wait, _ = l.Take(ctx, "k", limit, 1)
	require.Equal(t, 2*time.Millisecond, wait, "empty, refilling at 500/s")
	now = now.Add(time.Second / 2)
	wait, _ = l.Take(ctx, "k", limit, 3)
	require.Zero(t, wait, "n is capped at the lowered burst, 2, and the bucket refilled to it")
	wait, _ = l.Take(ctx, "k", limit, 2)
	require.Equal(t, 4*time.Millisecond, wait)
	now = now.Add(time.Second)
	wait, _ = l.Take(ctx, "k", limit, 4)
	require.Equal(t, 2*time.Millisecond, wait, "no longer lowered: it refilled up to the lowered burst, 2, and now refills at 1000/s")
	now = now.Add(2 * time.Millisecond)
	wait, _ = l.Take(ctx, "k", limit, 4)
	require.Zero(t, wait)

	rdb := redistest.NewClient(t)
	prefix := "test:rate:" + uuid.NewString() + ":"
	t.Cleanup(func() { _ = rdb.Del(context.Background(), prefix+"k").Err() })
	r := ratelimit.Redis{Client: rdb, Prefix: prefix}
	slow := domain.RateLimit{PerSecond: 2, Burst: 4}
	require.NoError(t, r.Lower(ctx, "k", slow, time.Minute))
	wait, err := r.Take(ctx, "k", slow, 1)
	require.NoError(t, err)
	require.Greater(t, wait, 900*time.Millisecond, "empty, refilling at 1/s")
	ttl, err := rdb.PTTL(ctx, prefix+"k").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 50*time.Second, "the bucket outlives its lowering")
}

// TestWaitLogCountsPerMinute: waits added by two processes (two values over one Redis) are
// counted per platform in the minute of their time; Recent sums the minutes asked, ending with
// now's, and leaves out older ones; each minute's hash expires.
func TestWaitLogCountsPerMinute(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewClient(t)
	prefix := "test:rate:" + uuid.NewString() + ":"
	ctx := context.Background()
	t.Cleanup(func() {
		keys, _ := rdb.Keys(context.Background(), prefix+"*").Result()
		for _, k := range keys {
			_ = rdb.Del(context.Background(), k).Err()
		}
	})
	a, b := ratelimit.WaitLog{Client: rdb, Prefix: prefix}, ratelimit.WaitLog{Client: rdb, Prefix: prefix}
	now := time.Unix(1_000_000*60+30, 0) // half a minute into a minute
	require.NoError(t, a.Add(ctx, "sandbox", now))
	require.NoError(t, b.Add(ctx, "sandbox", now.Add(-20*time.Second)))
	require.NoError(t, b.Add(ctx, "etsy", now.Add(-31*time.Second)), "the minute before")
	require.NoError(t, a.Add(ctx, "sandbox", now.Add(-59*time.Minute)))
	require.NoError(t, a.Add(ctx, "sandbox", now.Add(-60*time.Minute)), "out of the hour")

	got, err := a.Recent(ctx, now, 1)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"sandbox": 2}, got)
	got, err = b.Recent(ctx, now, 2)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"sandbox": 2, "etsy": 1}, got)
	got, err = b.Recent(ctx, now, 60)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"sandbox": 3, "etsy": 1}, got)
	ttl, err := rdb.TTL(ctx, prefix+"waits:1000000").Result()
	require.NoError(t, err)
	require.Positive(t, ttl)
	require.LessOrEqual(t, ttl, ratelimit.WaitLogKeep)
}
