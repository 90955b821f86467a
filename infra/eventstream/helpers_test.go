package eventstream_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisClient returns a client of the test Redis (REDIS_URL, default 127.0.0.1:6379/0) and
// a stream key of this test's own, deleted at the end.
func redisClient(t testing.TB) (*redis.Client, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis")
	}
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	key := "test-eventstream-" + uuid.NewString() + ":events"
	t.Cleanup(func() {
		// A redisstream Subscriber closes the client it was given: delete with a new one.
		c := redis.NewClient(opts)
		defer c.Close()
		_ = c.Del(context.Background(), key).Err()
		_ = rdb.Close()
	})
	return rdb, key
}
