package port

import (
	"context"
	"time"

	"github.com/listingkit/listing/domain"
)

// RateBuckets keeps token buckets by key (a workspace's API budget, a store's calls to its
// marketplace). Take takes one token from key's bucket under limit: wait 0 means it was
// taken; otherwise none was taken and wait is how long until one will be. A bucket starts
// full; limit may change between calls (the bucket keeps its tokens, capped at the new
// burst). Implementations shared by processes (Redis) make every process draw from one
// bucket. Safe for concurrent use.
type RateBuckets interface {
	Take(ctx context.Context, key string, limit domain.RateLimit) (wait time.Duration, err error)
}
