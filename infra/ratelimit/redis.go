package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
)

// Redis keeps token buckets in Redis, one hash per key (Prefix + key: tokens and the time of
// the last take, on the Redis server's clock, so that processes' clocks do not matter),
// expiring once it would be full again. Every process using the same Redis and Prefix draws
// from the same buckets. Safe for concurrent use.
type Redis struct {
	Client redis.UniversalClient
	// Prefix starts every key, e.g. "listing:rate:". Required.
	Prefix string
}

var _ port.RateBuckets = Redis{}

// takeScript: KEYS[1] the bucket; ARGV rate per second, burst, tokens wanted. Returns the
// wait in microseconds (0: the tokens were taken). While 'low' (microseconds, see
// lowerScript) is ahead, the limit is halved (domain.RateLimit.Lowered).
var takeScript = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at', 'low')
local tokens = tonumber(v[1])
local at = tonumber(v[2])
local low = tonumber(v[3]) or 0
if now < low then
  rate = rate / 2
  burst = math.max(1, math.floor(burst / 2))
end
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = tokens + (now - at) * rate / 1000000
  at = now
end
if tokens > burst then tokens = burst end
local want = math.min(math.max(tonumber(ARGV[3]), 1), burst)
local wait = 0
if tokens >= want then
  tokens = tokens - want
else
  wait = math.ceil((want - tokens) * 1000000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
local ttl = math.ceil((burst - tokens) * 1000 / rate) + 1000
if now < low then ttl = math.max(ttl, math.ceil((low - now) / 1000) + 1000) end
redis.call('PEXPIRE', KEYS[1], ttl)
return wait
`)

// lowerScript: KEYS[1] the bucket; ARGV rate per second (already lowered), lowered for
// microseconds. Empties the bucket and sets 'low'.
var lowerScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local low = now + tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'tokens', '0', 'at', tostring(now), 'low', tostring(low))
redis.call('PEXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2]) / 1000) + 1000)
return 0
`)

// Take implements port.RateBuckets with one script call. A zero limit always takes
// (without a call).
func (r Redis) Take(ctx context.Context, key string, limit domain.RateLimit, n int) (time.Duration, error) {
	if limit.IsZero() {
		return 0, nil
	}
	us, err := takeScript.Run(ctx, r.Client, []string{r.Prefix + key},
		strconv.FormatFloat(limit.PerSecond, 'f', -1, 64), limit.Burst, n).Int64()
	if err != nil {
		return 0, fmt.Errorf("ratelimit.Redis.Take: %w", err)
	}
	return time.Duration(us) * time.Microsecond, nil
}

// Lower implements port.RateBuckets with one script call.
func (r Redis) Lower(ctx context.Context, key string, limit domain.RateLimit, d time.Duration) error {
	if limit.IsZero() {
		return nil
	}
	if err := lowerScript.Run(ctx, r.Client, []string{r.Prefix + key},
		strconv.FormatFloat(limit.Lowered().PerSecond, 'f', -1, 64), d.Microseconds()).Err(); err != nil {
		return fmt.Errorf("ratelimit.Redis.Lower: %w", err)
	}
	return nil
}
