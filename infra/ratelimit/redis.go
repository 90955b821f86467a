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

// takeScript: KEYS[1] the bucket; ARGV rate per second, burst. Returns the wait in
// microseconds (0: a token was taken).
var takeScript = redis.NewScript(`
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local v = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(v[1])
local at = tonumber(v[2])
if tokens == nil or at == nil then
  tokens = burst
  at = now
end
if now > at then
  tokens = tokens + (now - at) * rate / 1000000
  at = now
end
if tokens > burst then tokens = burst end
local wait = 0
if tokens >= 1 then
  tokens = tokens - 1
else
  wait = math.ceil((1 - tokens) * 1000000 / rate)
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(at))
redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
return wait
`)

// Take implements port.RateBuckets with one script call. A zero limit always takes
// (without a call).
func (r Redis) Take(ctx context.Context, key string, limit domain.RateLimit) (time.Duration, error) {
	if limit.IsZero() {
		return 0, nil
	}
	us, err := takeScript.Run(ctx, r.Client, []string{r.Prefix + key},
		strconv.FormatFloat(limit.PerSecond, 'f', -1, 64), limit.Burst).Int64()
	if err != nil {
		return 0, fmt.Errorf("ratelimit.Redis.Take: %w", err)
	}
	return time.Duration(us) * time.Microsecond, nil
}
