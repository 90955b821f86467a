package tests

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/demo"
)

// TestDemo runs `make demo`'s walkthrough (internal/demo) twice in a row against the real
// binary: every step goes as the README says and every operation succeeds, and each run
// leaves no database and no Redis key behind.
func TestDemo(t *testing.T) {
	t.Parallel()
	app := seedBinary(t)
	opts, err := redis.ParseURL(seedRedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	admin, err := pgx.Connect(context.Background(), pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	for run := 1; run <= 2; run++ {
		var out strings.Builder
		res, err := demo.Run(t.Context(), demo.Config{App: app, Image: "../docs/demo/mug.png", PostgresURL: pgtest.AdminURL(),
			RedisURL: seedRedisURL(), Out: &out})
		require.NoError(t, err, "run %d:\n%s", run, out.String())
		names := map[string]bool{}
		for _, s := range res.Steps {
			names[s.Name] = true
			require.Contains(t, []string{"", "succeeded"}, s.Operation, "run %d: %s", run, s.Name)
		}
		for _, want := range []string{"register", "log in", "store", "product", "publish", "product sync", "AI task",
			"draft save (If-Match)", "upload the bytes", "complete the upload", "material transfer", "listing update"} {
			require.True(t, names[want], "run %d has the step %q:\n%s", run, want, out.String())
		}
		require.Contains(t, out.String(), "every operation succeeded")
		require.Contains(t, out.String(), "stopped (exit 0)")

		db := strings.TrimSpace(strings.SplitN(strings.SplitN(out.String(), "database ", 2)[1], ",", 2)[0])
		var left int
		require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, db).Scan(&left))
		require.Zero(t, left, "run %d dropped its database %s", run, db)
		prefix := strings.TrimSpace(strings.SplitN(strings.SplitN(out.String(), "Redis prefix ", 2)[1], ",", 2)[0])
		keys, err := rdb.Keys(context.Background(), prefix+":*").Result()
		require.NoError(t, err)
		require.Empty(t, keys, "run %d deleted its Redis keys", run)
	}
}
