package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/app/worker/storeverify"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// fairOptions size the fairness section (flags -fair-*).
type fairOptions struct {
	backlog    int // workspace N's tasks queued at once
	secs       int // Q publishes one task a second for this long
	workspaces int // the many-workspaces drain: workspaces ...
	per        int // ... times tasks each
}

// benchFairness measures fair share (FAIR_SHARE_SLOTS, the default 4 × workers) against the
// FIFO build (fair share off), end to end as benchE2E (outbox → dispatcher → BullMQ → Runner
// → worker.Flow with a no-op call): workspace N queues a backlog at once, then workspace Q
// publishes one task a second; Q's commit → job start p99, N's throughput over the same
// period against N alone; and the drain time of many workspaces with a few tasks each.
func benchFairness(ctx context.Context, o options, t *table) error {
	f := o.fair
	slots := config.FairShareFactor * o.workers
	fair, err := fairRun(ctx, o, slots, []int{f.backlog}, f.secs, true)
	if err != nil {
		return fmt.Errorf("fair share: %w", err)
	}
	fifo, err := fairRun(ctx, o, 0, []int{f.backlog}, f.secs, true)
	if err != nil {
		return fmt.Errorf("FIFO: %w", err)
	}
	alone, err := fairRun(ctx, o, slots, []int{f.backlog}, f.secs, false)
	if err != nil {
		return fmt.Errorf("N alone: %w", err)
	}
	fmt.Printf("   Q's commit → job start p99: fair share %s, FIFO %s; N's jobs/s: %.0f, alone %.0f\n",
		fair.qP99.Round(time.Millisecond), fifo.qP99.Round(time.Millisecond), fair.nRate, alone.nRate)
	t.add(line{measure: fmt.Sprintf("fairness: Q's commit → job start p99 behind N's %d", f.backlog),
		ours: fair.qP99.Round(time.Millisecond).String(), peer: "FIFO (fair share off)", peerFig: fifo.qP99.Round(time.Millisecond).String(),
		ratio: fair.qP99.Seconds() / max(fifo.qP99.Seconds(), 1e-9), target: "≤ 2s", met: fair.qP99 <= 2*time.Second})
	t.add(line{measure: "fairness: N's throughput beside Q", ours: perSec(fair.nRate, "jobs"), peer: "N alone", peerFig: perSec(alone.nRate, "jobs"),
		ratio: fair.nRate / alone.nRate, target: "≥ 0.9×", met: fair.nRate/alone.nRate >= 0.9})

	many := make([]int, f.workspaces)
	for i := range many {
		many[i] = f.per
	}
	fairDrain, err := fairRun(ctx, o, slots, many, 0, false)
	if err != nil {
		return fmt.Errorf("many workspaces, fair share: %w", err)
	}
	fifoDrain, err := fairRun(ctx, o, 0, many, 0, false)
	if err != nil {
		return fmt.Errorf("many workspaces, FIFO: %w", err)
	}
	t.add(line{measure: fmt.Sprintf("fairness: %d workspaces × %d jobs drain", f.workspaces, f.per),
		ours: fairDrain.drain.Round(time.Millisecond).String(), peer: "FIFO (fair share off)", peerFig: fifoDrain.drain.Round(time.Millisecond).String(),
		ratio: fairDrain.drain.Seconds() / fifoDrain.drain.Seconds(), target: "≤ 1.1×", met: fairDrain.drain.Seconds() <= 1.1*fifoDrain.drain.Seconds()})
	return nil
}

// fairResult is one run's figures.
type fairResult struct {
	qP99  time.Duration // Q's commit → job start p99 (when Q published)
	nRate float64       // workspace 0's jobs done per second over the run's first secs
	drain time.Duration // every task done (when secs is 0)
}

// fairRun commits backlog[i] store verifications in workspace i (8 committers, 100 per
// transaction; not timed), starts a dispatcher with slots (0: fair share off) and a Runner
// of o.workers; for secs seconds, it measures workspace 0's jobs done and, with withQ,
// commits one task a second in one more workspace (Q), measuring each one's commit → job
// start; then it waits until every task is done.
func fairRun(ctx context.Context, o options, slots int, backlog []int, secs int, withQ bool) (fairResult, error) {
	var res fairResult
	db, err := newScratch(ctx, o.adminURL, 60)
	if err != nil {
		return res, err
	}
	defer db.drop()
	wss, err := db.workspaces(ctx, len(backlog)+1)
	if err != nil {
		return res, err
	}
	q := wss[len(backlog)]
	stores := map[uuid.UUID]domain.Store{}
	for _, ws := range wss {
		s := domain.Store{ID: uuid.New(), WorkspaceID: ws, CredentialsVersion: 1}
		if _, err := db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status)
			VALUES ($1, $2, 'sandbox', $3, 'bench', 'verified')`, s.ID, ws, s.ID.String()); err != nil {
			return res, err
		}
		stores[ws] = s
	}
	events, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: outbox.Routes(flows.Routes())})
	if err != nil {
		return res, err
	}
	ops, verifications := postgres.NewOperations(), postgres.NewStoreVerifications()
	commit := func(ws uuid.UUID, k int) ([]uuid.UUID, error) {
		var ids []uuid.UUID
		err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			ids = ids[:0]
			now := time.Now()
			for range k {
				op := domain.NewOperation(ws, uuid.Nil, "store.verify", "store", stores[ws].ID, now)
				v := domain.NewStoreVerification(uuid.New(), ws, op.ID, stores[ws], now)
				if err := ops.Insert(ctx, op); err != nil {
					return err
				}
				if err := verifications.Insert(ctx, v); err != nil {
					return err
				}
				if err := events.Publish(ctx, v.RequestEvent()); err != nil {
					return err
				}
				ids = append(ids, v.ID)
			}
			return nil
		})
		return ids, err
	}
	type batch struct {
		ws uuid.UUID
		k  int
	}
	work := make(chan batch)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var commitErr error
	for range 8 {
		wg.Go(func() {
			for b := range work {
				if _, err := commit(b.ws, b.k); err != nil {
					mu.Lock()
					commitErr = errors.Join(commitErr, err)
					mu.Unlock()
				}
			}
		})
	}
	total := 0
	for i, n := range backlog {
		total += n
		for done := 0; done < n; done += 100 {
			work <- batch{wss[i], min(100, n-done)}
		}
	}
	close(work)
	wg.Wait()
	if commitErr != nil {
		return res, commitErr
	}

	cfg, err := config.Load()
	if err != nil {
		return res, err
	}
	cfg.RedisURL, cfg.BullMQPrefix = o.redisURL, "bench-"+randomHex(4)
	cfg.StreamPrefix = cfg.BullMQPrefix
	rdb, err := newRedis(ctx, o.redisURL, 4*o.workers)
	if err != nil {
		return res, err
	}
	defer rdb.Close()
	defer deletePrefix(rdb, cfg.BullMQPrefix)
	log := slog.New(slog.DiscardHandler)
	bcfg := listing.ProvideBullMQConfig(cfg, rdb)
	pubs, closePubs, err := listing.ProvidePublishers(cfg, bcfg, &listing.Queues{}, log)
	if err != nil {
		return res, err
	}
	defer closePubs()
	var fq []outbox.FairQueue
	for _, s := range flows.All() {
		fq = append(fq, outbox.FairQueue{Flow: s.Name, Queue: s.Queue, TaskIDField: s.TaskIDField, Table: s.Table})
	}
	d, err := outbox.NewDispatcher(outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true,
		FairShare: outbox.FairShare{Slots: slots, Queues: fq}}, db.App, pubs, log, nil)
	if err != nil {
		return res, err
	}
	transport, err := jobs.NewBullMQ(bullmq.SubscriberConfig{Config: bcfg, Concurrency: o.workers, Name: "bench"}, nil)
	if err != nil {
		return res, err
	}
	defer transport.Close()
	deps := worker.Deps{Tx: postgres.Transactor{Pool: db.App}, Operations: ops, Events: events, Now: time.Now}
	kind := storeverify.Tasks(deps, verifications)
	flow := worker.Flow[domain.StoreVerification, struct{}, struct{}]{Kind: kind,
		Call: func(context.Context, domain.StoreVerification, struct{}, worker.Tx) (struct{}, error) {
			return struct{}{}, nil
		},
		Record: func(context.Context, *domain.StoreVerification, struct{}) (any, error) {
			return map[string]any{}, nil
		}}
	var handled, nDone atomic.Int64
	var startsMu sync.Mutex
	starts := map[uuid.UUID]time.Time{} // Q's tasks: first job start
	counted := worker.HandlerFunc(func(ctx context.Context, job worker.Job) error {
		if job.WorkspaceID == q {
			if id, err := kind.TaskID(job); err == nil {
				startsMu.Lock()
				if _, ok := starts[id]; !ok {
					starts[id] = time.Now()
				}
				startsMu.Unlock()
			}
		}
		err := flow.Handle(ctx, job)
		if err == nil {
			handled.Add(1)
			if job.WorkspaceID == wss[0] {
				nDone.Add(1)
			}
		}
		return err
	})
	runner, err := jobs.NewRunner(jobs.Config{Transport: transport, Concurrency: o.workers, Logger: log,
		Handlers: map[string]worker.Handler{worker.QueueStoreVerification: counted},
		Kinds:    map[string]worker.TaskKind{worker.QueueStoreVerification: kind}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return res, err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var running sync.WaitGroup
	defer running.Wait()
	start := time.Now()
	running.Go(func() { _ = d.Run(rctx) })
	running.Go(func() { _ = runner.Run(rctx) })

	commits := map[uuid.UUID]time.Time{}
	if secs > 0 {
		tick := time.NewTicker(time.Second)
		for range secs {
			select {
			case <-ctx.Done():
				tick.Stop()
				return res, ctx.Err()
			case <-tick.C:
			}
			if !withQ {
				continue
			}
			ids, err := commit(q, 1)
			if err != nil {
				tick.Stop()
				return res, err
			}
			commits[ids[0]] = time.Now()
			total++
		}
		tick.Stop()
		res.nRate = float64(nDone.Load()) / time.Since(start).Seconds()
	}
	if err := waitDone(ctx, db, handled.Load, total, `SELECT count(*) FROM store_verifications WHERE status = 'succeeded'`); err != nil {
		return res, err
	}
	res.drain = time.Since(start)
	if withQ {
		var lat []time.Duration
		startsMu.Lock()
		for id, c := range commits {
			if s, ok := starts[id]; ok {
				lat = append(lat, s.Sub(c))
			}
		}
		startsMu.Unlock()
		slices.Sort(lat)
		if len(lat) > 0 {
			res.qP99 = lat[min(len(lat)-1, len(lat)*99/100)]
		}
	}
	fmt.Printf("   slots %d, %d workspaces, Q %t: done in %s; N %.0f jobs/s; Q p99 %s\n", slots, len(backlog), withQ,
		res.drain.Round(time.Millisecond), res.nRate, res.qP99.Round(time.Millisecond))
	return res, nil
}
