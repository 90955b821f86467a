package tests

// REDIS_CLUSTER_ADDRS: the whole service on a three-node Redis Cluster (redistest), with
// BULLMQ_QUEUE_HASH_TAGS=true so that each queue hashes to a slot of its own.

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/eventstream"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/internal/redistest"
	"github.com/listingkit/listing/internal/servicetest"
)

// TestClusterFlows: store verification, first publication and an AI task succeed with every
// Redis client of the service a cluster client; the three queues' keys each live on one node,
// and not all on the same one; the integration events' stream, the queue counts and the reconciler's
// probe read the cluster too.
func TestClusterFlows(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	cluster := redistest.Shared(t)
	env := servicetest.StartAll(t, func(c *config.Config) {
		c.RedisClusterAddrs, c.BullMQQueueHashTags = cluster.Addrs, true
	})
	require.IsType(t, &redis.ClusterClient{}, env.API.Redis)
	ready := env.Do(servicetest.Request{Method: "GET", Path: "/readyz"})
	require.Equal(t, http.StatusOK, ready.Status, "%s", ready.Body)

	acct := env.Register("cluster@example.com")
	storeID := seedVerifiedStore(t, env, acct, "cluster")
	productID := seedProduct(t, env, acct)
	pub := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/products/" + productID + "/publications",
		Token: acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	op := env.WaitOperation(acct, seedField(t, pub, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)
	require.Equal(t, 1, env.Work.Externals.MarketplaceSandbox.ProductsWithRef(seedField(t, pub, "publication", "id")))
	ai := env.Do(servicetest.Request{Method: "POST", Path: seedWS(acct) + "/ai-tasks", Token: acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": productID, "input": map[string]any{"prompt": "a short description"}}})
	require.Equal(t, http.StatusAccepted, ai.Status, "%s", ai.Body)
	op = env.WaitOperation(acct, seedField(t, ai, "operation", "id"))
	require.Equal(t, "succeeded", op["status"], "%v", op)

	ctx := context.Background()
	rdb := cluster.Client(t)
	bcfg := listing.ProvideBullMQConfig(env.Config, env.API.Redis)
	homes := map[string]bool{}
	for _, q := range []string{worker.QueueStoreVerification, worker.QueueListingPublish, worker.QueueAITask} {
		base := env.Config.BullMQPrefix + ":{" + q + "}:"
		require.Equal(t, base, env.Config.BullMQPrefix+":"+bcfg.QueueName(q)+":")
		home, err := redistest.NodeOf(ctx, rdb, base+"completed")
		require.NoError(t, err)
		homes[home] = true
		require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			keys, err := n.Keys(ctx, strings.NewReplacer("{", "\\{", "}", "\\}").Replace(base)+"*").Result()
			if err != nil {
				return err
			}
			if n.Options().Addr == home {
				assert.Contains(t, keys, base+"completed", "queue %s on %s", q, home)
			} else {
				assert.Empty(t, keys, "keys of queue %s on %s, away from its node %s", q, n.Options().Addr, home)
			}
			return nil
		}))
		counts, err := bullmq.QueueCounts(ctx, bcfg, q)
		require.NoError(t, err)
		assert.Positive(t, counts[bullmq.StateCompleted], "completed jobs of %s", q)
		id := seedOne(t, env.DB, "SELECT id::text FROM outbox_all_events WHERE destination = $1 LIMIT 1", q)
		unfinished, err := jobs.BullMQProbe{Config: bcfg}.Unfinished(ctx, q, []string{id})
		require.NoError(t, err)
		assert.Equal(t, map[string]bool{id: false}, unfinished, "the job of %s is finished", q)
	}
	assert.GreaterOrEqual(t, len(homes), 2, "the queues spread over the nodes")
	n, err := rdb.XLen(ctx, eventstream.Stream(env.Config.StreamPrefix)).Result()
	require.NoError(t, err)
	assert.Positive(t, n, "the integration events' stream")
	assert.NotContains(t, env.Logs(), "wake-up subscription failed", "the dispatchers' wake-ups (Redis Pub/Sub) work on the cluster")
}
