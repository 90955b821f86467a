package eventstream_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/internal/redistest"
)

// redisClient returns a client of the test Redis (REDIS_URL, default 127.0.0.1:6379/0) and
// a stream key of this test's own, deleted at the end.
func redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb := redistest.NewClient(t)
	key := "test-eventstream-" + uuid.NewString() + ":events"
	t.Cleanup(func() {
		// A redisstream Subscriber closes the client it was given: delete with a new one.
		c := redis.NewClient(rdb.Options())
		defer c.Close()
		_ = c.Del(context.Background(), key).Err()
	})
	return rdb, key
}
