package main

import (
	"context"
	"math"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
)

// The -addr flag is checked like HTTP_ADDR: development keys stay on loopback.
func TestAddrFlagBeyondLoopbackRefusesDevelopmentKeys(t *testing.T) {
	t.Setenv("APP_ENV", "development")
	t.Setenv("AUTH_TOKEN_KEYS", "")
	for _, k := range []string{"DATABASE_URL", "MIGRATE_DATABASE_URL"} {
		t.Setenv(k, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	}
	for _, sub := range []string{"serve", "all"} {
		err := realMain(context.Background(), []string{sub, "-addr", "0.0.0.0:0"})
		require.ErrorContains(t, err, "HTTP_ADDR", sub)
	}
}

func TestMemoryLimit(t *testing.T) {
	noEnv := func(string) (string, bool) { return "", false }
	limit, source := memoryLimit(config.Config{MemoryLimit: 1 << 30}, noEnv)
	require.Equal(t, int64(1<<30), limit)
	require.Equal(t, "MEMORY_LIMIT", source)

	limit, _ = memoryLimit(config.Config{MemoryLimit: 0}, noEnv)
	require.Equal(t, int64(math.MaxInt64), limit, "0 sets no limit")

	// An operator's GOMEMLIMIT wins; the runtime applied it at start.
	gomemlimit := func(k string) (string, bool) { return "300MiB", k == "GOMEMLIMIT" }
	limit, source = memoryLimit(config.Config{MemoryLimit: 1 << 30}, gomemlimit)
	require.Equal(t, debug.SetMemoryLimit(-1), limit)
	require.Equal(t, "GOMEMLIMIT", source)
}
