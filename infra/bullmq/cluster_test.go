package bullmq_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/internal/redistest"
)

// TestClusterInterop runs the Node.js interop tests on the test binary's three-node Redis
// Cluster, with QueueHashTags (Go) and ioredis Cluster (Node.js, given the wrapped names):
// publishing, consuming, retries through delayed, stalled recovery across languages, and
// deduplication, each queue in the slot of its own hash tag.
func TestClusterInterop(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	for name, f := range map[string]func(*testing.T, bundle){
		"GoPublishNodeWorkers":     testGoPublishNodeWorkers,
		"NodeAddGoWorker":          testNodeAddGoWorker,
		"MixedConsumers2000":       testMixedConsumers2000,
		"KillGoWorkerNodeRecovers": testKillGoWorkerNodeRecovers,
		"KillNodeWorkerGoRecovers": testKillNodeWorkerGoRecovers,
		"DuplicateJobID":           testDuplicateJobID,
	} {
		t.Run(name, func(t *testing.T) { f(t, setupCluster(t)) })
	}
}

// On a cluster, the Go publisher and worker keep every key of a queue on one node, also the
// keys the scripts reach in Lua (jobs promoted from delayed, trimmed by count, their locks);
// with QueueHashTags the queues spread over the nodes, with a tag in the prefix they share
// one; counts and the unfinished probe read them there.
func TestClusterQueuesKeepTheirKeysOnOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Redis Cluster")
	}
	t.Parallel()
	ctx := context.Background()
	c := redistest.Shared(t)
	rdb := c.Client(t)
	for _, mode := range []struct {
		name      string
		cfg       bullmq.Config
		wantNodes int // nodes the queues land on
	}{
		{"QueueHashTags", bullmq.Config{QueueHashTags: true}, redistest.Nodes},
		{"PrefixTag", bullmq.Config{}, 1},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cfg := mode.cfg
			cfg.Client = rdb
			cfg.Prefix = "t" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
			if !cfg.QueueHashTags {
				cfg.Prefix = "{" + cfg.Prefix + "}"
			}
			t.Cleanup(func() { _ = redistest.DeleteKeys(ctx, rdb, cfg.Prefix+":*") })
			pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: cfg}, nil)
			require.NoError(t, err)
			// Two queues per node a queue's hash can reach: six names whose wait lists land
			// two on each node (hash tags), or on the prefix's one node.
			var queues []string
			perNode := map[string]int{}
			for len(queues) < 6 {
				q := "q" + uuid.NewString()[:8]
				n, err := redistest.NodeOf(ctx, rdb, cfg.Prefix+":"+cfg.QueueName(q)+":wait")
				require.NoError(t, err)
				if perNode[n] < 2 || !cfg.QueueHashTags {
					perNode[n]++
					queues = append(queues, q)
				}
			}
			var done atomic.Int64
			for _, q := range queues {
				// Three jobs: one completes, one retries through delayed, one fails; the
				// completed and failed sets keep one job each (trimming by count in Lua).
				jobs := []bullmq.Job{
					job(behaviour{}, &bullmq.JobOptions{Attempts: 1, RemoveOnComplete: &bullmq.KeepJobs{Count: 1}}),
					job(behaviour{Behave: "failUntil", FailUntil: 1}, &bullmq.JobOptions{Attempts: 2,
						Backoff: &bullmq.Backoff{Type: bullmq.BackoffFixed, Delay: 20}, RemoveOnComplete: &bullmq.KeepJobs{Count: 1}}),
					job(behaviour{Behave: "fail"}, &bullmq.JobOptions{Attempts: 1, RemoveOnFail: &bullmq.KeepJobs{Count: 1}}),
				}
				_, err := pub.Add(ctx, q, jobs)
				require.NoError(t, err)
				unfinished, err := bullmq.JobsUnfinished(ctx, cfg, q, []string{jobs[0].ID, "nope"})
				require.NoError(t, err)
				assert.Equal(t, map[string]bool{jobs[0].ID: true, "nope": false}, unfinished)
				_, waiting, err := bullmq.OldestWaiting(ctx, cfg, q)
				require.NoError(t, err)
				assert.True(t, waiting, "the oldest waiting job of %s", q)
				w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: cfg, Queue: q, Concurrency: 2,
					DrainDelay: 100 * time.Millisecond, StalledInterval: 200 * time.Millisecond, Logger: testLogger{t}},
					behaveHandler(func(j *bullmq.Job) { done.Add(1) }))
				require.NoError(t, err)
				runWorker(t, w)
			}
			waitFor(t, 30*time.Second, "every queue drained", func() bool {
				for _, q := range queues {
					n, err := bullmq.QueueCounts(ctx, cfg, q)
					if err != nil || n[bullmq.StateCompleted] != 1 || n[bullmq.StateFailed] != 1 ||
						n[bullmq.StateWaiting]+n[bullmq.StateActive]+n[bullmq.StateDelayed] != 0 {
						return false
					}
				}
				return true
			})
			assert.Equal(t, int64(4*len(queues)), done.Load(), "attempts")
			// The operators' functions find the failed job where the worker left it.
			for _, q := range queues[:2] {
				failed, err := bullmq.FailedJobs(ctx, cfg, q, 10)
				require.NoError(t, err)
				require.Len(t, failed, 1, "failed jobs of %s", q)
				require.NoError(t, bullmq.RemoveJob(ctx, cfg, q, failed[0].ID))
				failed, err = bullmq.FailedJobs(ctx, cfg, q, 10)
				require.NoError(t, err)
				assert.Empty(t, failed)
			}

			// Every key of a queue lives on one node (the node of its wait list).
			nodes := map[string]bool{}
			for _, q := range queues {
				base := cfg.Prefix + ":" + cfg.QueueName(q) + ":"
				home, err := redistest.NodeOf(ctx, rdb, base+"wait")
				require.NoError(t, err)
				nodes[home] = true
				require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
					keys, err := n.Keys(ctx, strings.NewReplacer("{", "\\{", "}", "\\}").Replace(base)+"*").Result()
					if err != nil {
						return err
					}
					if n.Options().Addr == home {
						assert.Contains(t, keys, base+"completed")
						assert.Contains(t, keys, base+"events")
					} else {
						assert.Empty(t, keys, "keys of %s on %s, away from %s", q, n.Options().Addr, home)
					}
					return nil
				}))
			}
			assert.Len(t, nodes, mode.wantNodes, "nodes holding the queues")
		})
	}
}
