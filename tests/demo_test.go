package tests

import (
	"context"
	"os"
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
	if testing.Short() {
		t.Skip("the demo needs PostgreSQL and Redis")
	}
	app := seedBinary(t)
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

		dbs, keys := demoLeftovers(t, out.String())
		require.Zero(t, dbs, "run %d dropped its database", run)
		require.Empty(t, keys, "run %d deleted its Redis keys", run)
	}
}

// demoLeftovers returns the demo's database and Redis keys that still exist, named by its
// output.
func demoLeftovers(t *testing.T, out string) (databases int, keys []string) {
	t.Helper()
	db := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "database ", 2)[1], ",", 2)[0])
	prefix := strings.TrimSpace(strings.SplitN(strings.SplitN(out, "Redis prefix ", 2)[1], ",", 2)[0])
	admin, err := pgx.Connect(context.Background(), pgtest.AdminURL())
	require.NoError(t, err)
	defer admin.Close(context.Background())
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_database WHERE datname = $1`, db).Scan(&databases))
	opts, err := redis.ParseURL(seedRedisURL())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	keys, err = rdb.Keys(context.Background(), prefix+":*").Result()
	require.NoError(t, err)
	return databases, keys
}

// TestDemoStopsWhatItStartedWhenInterrupted: cancelled in the middle (Ctrl-C), the demo
// stops the instance cleanly and removes its database and Redis keys; when the service
// cannot start, it says so, shows the service's log and leaves nothing behind either.
func TestDemoStopsWhatItStartedWhenInterrupted(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("the demo needs PostgreSQL and Redis")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var out strings.Builder
	var published bool
	_, err := demo.Run(ctx, demo.Config{App: seedBinary(t), Image: "../docs/demo/mug.png", PostgresURL: pgtest.AdminURL(),
		RedisURL: seedRedisURL(), Out: &out, OnStep: func(s demo.Step) {
			if s.Name == "publish" {
				published = true
				cancel()
			}
		}})
	require.ErrorIs(t, err, context.Canceled, out.String())
	require.True(t, published, out.String())
	require.Contains(t, out.String(), "interrupted after")
	require.Contains(t, out.String(), "stopped (exit 0)")
	require.NotContains(t, out.String(), "product sync", "nothing runs after the interruption")
	dbs, keys := demoLeftovers(t, out.String())
	require.Zero(t, dbs, "the database is dropped")
	require.Empty(t, keys, "the Redis keys are deleted")

	out.Reset()
	failing := t.TempDir() + "/app"
	require.NoError(t, os.WriteFile(failing, []byte("#!/bin/sh\necho 'app: cannot start' >&2\nexit 1\n"), 0o755))
	_, err = demo.Run(t.Context(), demo.Config{App: failing, Image: "../docs/demo/mug.png", PostgresURL: pgtest.AdminURL(),
		RedisURL: seedRedisURL(), Out: &out})
	require.ErrorContains(t, err, "exited before it was ready")
	require.Contains(t, out.String(), "app: cannot start", "the service's log is shown")
	dbs, keys = demoLeftovers(t, out.String())
	require.Zero(t, dbs)
	require.Empty(t, keys)
}
