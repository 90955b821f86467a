package redistest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// URL is the single Redis server of the tests: REDIS_URL, by default redis://127.0.0.1:6379/0.
func URL() string {
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://127.0.0.1:6379/0"
}

// NewClient returns a client of URL(), closed when t ends. It skips t in -short mode and
// fails t when the server does not answer PING.
func NewClient(t testing.TB) *redis.Client {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis")
	}
	opts, err := redis.ParseURL(URL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, rdb.Ping(ctx).Err(), "the tests need Redis at REDIS_URL")
	return rdb
}
