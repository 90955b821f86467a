package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// Start makes a three-master cluster whose slots spread keys over the nodes; Stop kills it.
func TestStartStop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	ctx := context.Background()
	start := time.Now()
	c, err := Start(ctx)
	require.NoError(t, err)
	t.Logf("cluster %v up in %s", c.Addrs, time.Since(start).Round(time.Millisecond))
	rdb := c.Client(t)
	nodes := map[string]bool{}
	for _, k := range []string{"{a}", "{b}", "{c}", "{d}", "{e}", "{f}"} {
		require.NoError(t, rdb.Set(ctx, k, "v", 0).Err())
		n, err := NodeOf(ctx, rdb, k)
		require.NoError(t, err)
		nodes[n] = true
	}
	require.Len(t, nodes, Nodes, "six tags land on every node")
	require.NoError(t, DeleteKeys(ctx, rdb, "{*"))
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		require.Zero(t, n.DBSize(ctx).Val())
		return nil
	}))
	c.Stop()
	c.Stop()
	for _, a := range c.Addrs {
		require.Error(t, ping(ctx, a), "%s still answers", a)
	}
}
