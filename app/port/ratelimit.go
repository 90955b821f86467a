package port

import (
	"context"
	"time"

	"github.com/listingkit/listing/domain"
)

// RateBuckets keeps token buckets by key (a workspace's API budget, a store's calls to its
// marketplace). Take takes n tokens (at least 1, at most the burst) from key's bucket under
// limit: wait 0 means they were taken; otherwise none was taken and wait is how long until
// they will be. A bucket starts full; limit may change between calls (the bucket keeps its
// tokens, capped at the new burst). Lower is what an upstream's 429 says of key's budget: for
// d, takes under key get half of the limit they ask for (rate and burst, the burst at least
// 1), and the bucket is emptied now. Implementations shared by processes (Redis) make every
// process draw from one bucket. Safe for concurrent use.
type RateBuckets interface {
	Take(ctx context.Context, key string, limit domain.RateLimit, n int) (wait time.Duration, err error)
	Lower(ctx context.Context, key string, limit domain.RateLimit, d time.Duration) error
}
