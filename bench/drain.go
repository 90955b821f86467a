package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
)

// benchDrain measures the drain of o.n committed events into BullMQ: the Dispatcher from one
// workspace and from 10,000, each beside Node.js addBulk of as many jobs run just before it,
// and watermill-sql's subscriber + forwarder draining as many committed messages.
func benchDrain(ctx context.Context, o options, t *table) error {
	rdb, err := newRedis(ctx, o.redisURL, 40)
	if err != nil {
		return err
	}
	defer rdb.Close()

	// Node runs right before each of ours: on a shared machine the load drifts, and each
	// ratio compares measurements taken side by side.
	node1, err := nodeAddBulk(ctx, o, rdb, o.n)
	if err != nil {
		return err
	}
	fmt.Printf("   Node.js addBulk: %.0f jobs/s\n", node1)
	one, err := drainOurs(ctx, o, rdb, 1, outbox.DispatcherConfig{BatchSize: 1000, Concurrency: 4})
	if err != nil {
		return err
	}
	fmt.Printf("   dispatcher, 1 workspace: %.0f events/s\n", one)
	node2, err := nodeAddBulk(ctx, o, rdb, o.n)
	if err != nil {
		return err
	}
	fmt.Printf("   Node.js addBulk: %.0f jobs/s\n", node2)
	many, err := drainOurs(ctx, o, rdb, 10000, outbox.DispatcherConfig{BatchSize: 1000, Concurrency: 8, DiscoveryLimit: 10000})
	if err != nil {
		return err
	}
	fmt.Printf("   dispatcher, 10,000 workspaces: %.0f events/s\n", many)
	wm, err := drainWatermill(ctx, o, rdb, o.n)
	if err != nil {
		return err
	}
	fmt.Printf("   watermill-sql subscriber + forwarder: %.0f messages/s\n", wm)

	t.add(line{measure: "drain, 1 workspace vs Node addBulk", ours: perSec(one, "events"), peer: "Node addBulk",
		peerFig: perSec(node1, "jobs"), ratio: one / node1, target: "≥ 1.30×", met: one/node1 >= 1.3})
	t.add(line{measure: "drain, 10,000 workspaces vs Node addBulk", ours: perSec(many, "events"), peer: "Node addBulk",
		peerFig: perSec(node2, "jobs"), ratio: many / node2, target: "≥ 0.90×", met: many/node2 >= 0.9})
	t.add(line{measure: "drain, 1 workspace vs watermill-sql forwarder", ours: perSec(one, "events"), peer: "watermill-sql",
		peerFig: perSec(wm, "msgs"), ratio: one / wm, target: "≥ 5×", met: one/wm >= 5})
	return nil
}

// drainOurs commits o.n events over the given number of workspaces, then runs a Dispatcher
// until every event is a BullMQ job, and returns events/s.
func drainOurs(ctx context.Context, o options, rdb *redis.Client, workspaces int, cfg outbox.DispatcherConfig) (float64, error) {
	db, err := newScratch(ctx, o.adminURL, 20)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	wss, err := db.workspaces(ctx, workspaces)
	if err != nil {
		return 0, err
	}
	if err := db.backlog(ctx, wss, o.n); err != nil {
		return 0, err
	}
	n := o.n / workspaces * workspaces
	prefix := "bench-" + randomHex(4)
	defer deletePrefix(rdb, prefix)
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: prefix}}, nil)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	c := newCounting(pub, n, false)
	cfg.MetricsInterval, cfg.DisableListen = -1, true
	d, err := outbox.NewDispatcher(cfg, db.App, outbox.PublisherMap{benchQueue: c}, nil, nil)
	if err != nil {
		return 0, err
	}
	dctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	before := snapshot(ctx, db, rdb)
	start := time.Now()
	go func() { done <- d.Run(dctx) }()
	err = c.wait(ctx, 20*time.Minute)
	el := time.Since(start)
	report(fmt.Sprintf("dispatcher, %d workspace(s)", workspaces), before, snapshot(ctx, db, rdb), n, "event")
	cancel()
	return float64(n) / el.Seconds(), errors.Join(err, <-done)
}

// nodeAddBulk runs tests/bullmqnode/bench-producer.mjs (n jobs, addBulk chunks of 1,000) and
// returns jobs/s. The job options are those bullmqbench gives Node.js: the layout the Go
// publisher writes.
func nodeAddBulk(ctx context.Context, o options, rdb *redis.Client, n int) (float64, error) {
	dir := filepath.Join(o.root, "tests", "bullmqnode")
	if err := ensureNode(dir); err != nil {
		return 0, err
	}
	prefix := "bench-" + randomHex(4)
	defer deletePrefix(rdb, prefix)
	var res struct{ N, Ms float64 }
	err := runNode(ctx, o, dir, "bench-producer.mjs", map[string]any{
		"queue": benchQueue, "prefix": prefix, "n": n, "chunk": 1000, "idPrefix": "node",
		"opts":     map[string]any{"attempts": 3, "backoff": map[string]any{"type": "exponential", "delay": 1000}, "removeOnComplete": bullmq.DefaultKeepCompleted, "removeOnFail": map[string]any{"age": int64(bullmq.DefaultFailedRetention / time.Second)}},
		"dedupTtl": bullmq.DefaultDedupWindow.Milliseconds(),
	}, &res)
	if err != nil {
		return 0, err
	}
	return res.N / (res.Ms / 1000), nil
}

func runNode(ctx context.Context, o options, dir, script string, cfg any, out any) error {
	b, _ := json.Marshal(cfg)
	cmd := exec.CommandContext(ctx, "node", script, string(b))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDIS_URL="+o.redisURL)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	res, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("node %s: %w: %s", script, err, stderr.String())
	}
	lines := bytes.Split(bytes.TrimSpace(res), []byte("\n"))
	return json.Unmarshal(lines[len(lines)-1], out)
}

func ensureNode(dir string) error {
	if _, err := exec.LookPath("node"); err != nil {
		return errors.New("node is not installed")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "bullmq")); err == nil {
		return nil
	}
	cmd := exec.Command("npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("npm ci: %w: %s", err, out)
	}
	return nil
}

// wmTopic is the forwarder topic of the watermill-sql peers.
const wmTopic = "bench_forwarder"

// drainWatermill commits n forwarder envelopes (destination: the bench queue) into
// watermill-sql's PostgreSQL schema, then runs its subscriber (default settings) feeding
// watermill's forwarder into the same BullMQ publisher, until all n are jobs; messages/s.
func drainWatermill(ctx context.Context, o options, rdb *redis.Client, n int) (float64, error) {
	db, err := newEmptyScratch(ctx, o.adminURL)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(db.Owner), wsql.SubscriberConfig{
		SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
		OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
		InitializeSchema: true,
	}, watermill.NopLogger{})
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(wmTopic); err != nil {
		return 0, err
	}
	for done := 0; done < n; done += 1000 {
		if err := wmCommit(ctx, db, min(1000, n-done)); err != nil {
			return 0, err
		}
	}
	prefix := "bench-" + randomHex(4)
	defer deletePrefix(rdb, prefix)
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: prefix}}, nil)
	if err != nil {
		return 0, err
	}
	defer pub.Close()
	c := newCounting(pub, n, false)
	fwd, err := forwarder.NewForwarder(sub, c, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: wmTopic})
	if err != nil {
		return 0, err
	}
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	before := snapshot(ctx, db, rdb)
	start := time.Now()
	go func() { _ = fwd.Run(fctx) }()
	err = c.wait(ctx, 20*time.Minute)
	el := time.Since(start)
	report("watermill-sql forwarder", before, snapshot(ctx, db, rdb), n, "msg")
	cancel()
	_ = fwd.Close()
	return float64(n) / el.Seconds(), err
}

// wmCommit commits k forwarder envelopes for the bench queue in one transaction through
// watermill-sql's publisher.
func wmCommit(ctx context.Context, db *scratch, k int) error {
	tx, err := db.Owner.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	sp, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, nil)
	if err != nil {
		return err
	}
	fp := forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: wmTopic})
	msgs := make([]*message.Message, k)
	for i := range msgs {
		id := uuid.Must(uuid.NewV7())
		b, _ := json.Marshal(benchHappened{ID: id, ThingID: id.String()})
		msgs[i] = message.NewMessage(id.String(), b)
		msgs[i].Metadata.Set(outbox.MetadataEventType, "bench.happened")
		msgs[i].SetContext(ctx)
	}
	if err := fp.Publish(benchQueue, msgs...); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
