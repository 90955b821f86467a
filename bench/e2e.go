package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

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

// benchE2E measures committed commands → every job completed: ours (outbox → dispatcher →
// BullMQ → infra/jobs Runner → worker.Flow with a no-op call: begin and record transactions
// as in production) vs River (InsertManyTx, then no-op workers).
func benchE2E(ctx context.Context, o options, t *table) error {
	ours, err := e2eOurs(ctx, o)
	if err != nil {
		return fmt.Errorf("ours: %w", err)
	}
	fmt.Printf("   ours: %.0f jobs/s\n", ours)
	rv, err := e2eRiver(ctx, o)
	if err != nil {
		return fmt.Errorf("river: %w", err)
	}
	fmt.Printf("   River: %.0f jobs/s\n", rv)
	t.add(line{measure: fmt.Sprintf("end to end, %d committed commands → jobs done", o.n), ours: perSec(ours, "jobs"),
		peer: "River v0.51.2", peerFig: perSec(rv, "jobs"), ratio: ours / rv, target: "≥ 0.2×", met: ours/rv >= 0.2})
	return nil
}

func e2eOurs(ctx context.Context, o options) (float64, error) {
	db, err := newScratch(ctx, o.adminURL, 60)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	wss, err := db.workspaces(ctx, 100)
	if err != nil {
		return 0, err
	}
	stores := map[uuid.UUID]domain.Store{}
	for _, ws := range wss {
		s := domain.Store{ID: uuid.New(), WorkspaceID: ws, CredentialsVersion: 1}
		if _, err := db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status)
			VALUES ($1, $2, 'sandbox', $3, 'bench', 'verified')`, s.ID, ws, s.ID.String()); err != nil {
			return 0, err
		}
		stores[ws] = s
	}
	events, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: outbox.Routes(flows.Routes())})
	if err != nil {
		return 0, err
	}
	ops, verifications := postgres.NewOperations(), postgres.NewStoreVerifications()

	// The commands: an operation, a verification task and its request event, committed
	// together, 100 commands per transaction, 8 committers.
	start := time.Now()
	work := make(chan int)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var commitErr error
	for range 8 {
		wg.Go(func() {
			for i := range work {
				ws := wss[i%len(wss)]
				err := postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
					now := time.Now()
					for range 100 {
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
					}
					return nil
				})
				if err != nil {
					mu.Lock()
					commitErr = errors.Join(commitErr, err)
					mu.Unlock()
				}
			}
		})
	}
	n := o.n / 100 * 100
	for i := range n / 100 {
		work <- i
	}
	close(work)
	wg.Wait()
	if commitErr != nil {
		return 0, commitErr
	}
	fmt.Printf("   ours: %d commands committed in %s (not timed below)\n", n, time.Since(start).Round(time.Millisecond))

	cfg, err := config.Load()
	if err != nil {
		return 0, err
	}
	// The queues and the integration event stream under a prefix of the run's own, deleted
	// after it.
	cfg.RedisURL, cfg.BullMQPrefix = o.redisURL, "bench-"+randomHex(4)
	cfg.StreamPrefix = cfg.BullMQPrefix
	rdb, err := newRedis(ctx, o.redisURL, 4*o.workers)
	if err != nil {
		return 0, err
	}
	defer rdb.Close()
	defer deletePrefix(rdb, cfg.BullMQPrefix)
	log := slog.New(slog.DiscardHandler)
	bcfg := listing.ProvideBullMQConfig(cfg, rdb)
	pubs, closePubs, err := listing.ProvidePublishers(cfg, bcfg, &listing.Queues{}, log)
	if err != nil {
		return 0, err
	}
	defer closePubs()
	d, err := outbox.NewDispatcher(outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true}, db.App, pubs, log, nil)
	if err != nil {
		return 0, err
	}
	transport, err := jobs.NewBullMQ(bullmq.SubscriberConfig{Config: bcfg, Concurrency: o.workers, Name: "bench"}, nil)
	if err != nil {
		return 0, err
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
	var handled atomic.Int64 // jobs whose lifecycle ended in success (the record committed)
	counted := worker.HandlerFunc(func(ctx context.Context, job worker.Job) error {
		err := flow.Handle(ctx, job)
		if err == nil {
			handled.Add(1)
		}
		return err
	})
	runner, err := jobs.NewRunner(jobs.Config{Transport: transport, Concurrency: o.workers, Logger: log,
		Handlers: map[string]worker.Handler{worker.QueueStoreVerification: counted},
		Kinds:    map[string]worker.TaskKind{worker.QueueStoreVerification: kind}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return 0, err
	}
	if o.console > 0 {
		stop, err := watchConsole(ctx, o, db, rdb, cfg.BullMQPrefix)
		if err != nil {
			return 0, err
		}
		defer stop()
	}
	rctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	before := countOutbox(ctx, db, snapshot(ctx, db, rdb))
	pgWaits := sampleWaits(ctx, db)
	start = time.Now()
	running.Go(func() { _ = d.Run(rctx) })
	running.Go(func() { _ = runner.Run(rctx) })
	err = waitDone(ctx, db, handled.Load, n, `SELECT count(*) FROM store_verifications WHERE status = 'succeeded'`)
	el := time.Since(start)
	report("ours", before, countOutbox(ctx, db, snapshot(ctx, db, rdb)), n, "job")
	fmt.Printf("   ours: PostgreSQL %s\n", pgWaits.summary())
	cancel()
	running.Wait()
	return float64(n) / el.Seconds(), err
}

// waitDone waits (up to 20 minutes) until done, an in-process count, reaches n, then
// confirms with query (as the owner) that n are done, polling it until they are (a job
// handled twice counts twice in done). The measured period does no database work of its
// own: counting 100,000 rows every 100 ms took 78 ms a time, most of a core of the server
// the measured systems run on.
func waitDone(ctx context.Context, db *scratch, done func() int64, n int, query string) error {
	deadline := time.Now().Add(20 * time.Minute)
	for done() < int64(n) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d done within 20 minutes", done(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return waitCount(ctx, db, query, n, time.Minute)
}

// waitCount polls query (as the owner) every 100 ms until it returns at least n.
func waitCount(ctx context.Context, db *scratch, query string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var got int
	for time.Now().Before(deadline) {
		if err := db.Owner.QueryRow(ctx, query).Scan(&got); err != nil {
			return err
		}
		if got >= n {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%d of %d done within %s", got, n, timeout)
}

type noopArgs struct {
	N int `json:"n"`
}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func e2eRiver(ctx context.Context, o options) (float64, error) {
	db, err := newEmptyScratch(ctx, o.adminURL)
	if err != nil {
		return 0, err
	}
	defer db.drop()
	// River's client runs on a pool of its own whose statements are counted (the owner pool
	// also serves the measurement's own queries).
	pc, err := pgxpool.ParseConfig(db.ownerURL)
	if err != nil {
		return 0, err
	}
	db.stmts = &stmtCounter{}
	pc.ConnConfig.Tracer = db.stmts
	rpool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return 0, err
	}
	defer rpool.Close()
	driver := riverpgxv5.New(rpool)
	m, err := rivermigrate.New(driver, nil)
	if err != nil {
		return 0, err
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return 0, err
	}
	workers := river.NewWorkers()
	river.AddWorker(workers, &noopWorker{})
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.workers}},
		Workers: workers,
		Logger:  slog.New(slog.DiscardHandler),
		// River fetches at most once per FetchCooldown (default 100 ms: at most MaxWorkers
		// jobs per 100 ms). The peer is measured at its best: the lowest cooldown River takes.
		FetchCooldown: time.Millisecond,
	})
	if err != nil {
		return 0, err
	}
	start := time.Now()
	params := make([]river.InsertManyParams, o.n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{N: i}}
	}
	tx, err := db.Owner.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if _, err := client.InsertManyTx(ctx, tx, params); err != nil {
		return 0, err
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	fmt.Printf("   River: %d jobs inserted with InsertManyTx in %s (not timed below)\n", o.n, time.Since(start).Round(time.Millisecond))
	before := snapshot(ctx, db, nil)
	pgWaits := sampleWaits(ctx, db)
	start = time.Now()
	// Completions are counted from River's events, sent once the completion is persisted;
	// the channel holds every one of them (River drops events a full channel cannot take).
	events, cancelEvents := client.SubscribeConfig(&river.SubscribeConfig{Kinds: []river.EventKind{river.EventKindJobCompleted}, ChanSize: o.n + 1000})
	defer cancelEvents()
	var completed atomic.Int64
	go func() {
		for range events {
			completed.Add(1)
		}
	}()
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	err = waitDone(ctx, db, completed.Load, o.n, `SELECT count(*) FROM river_job WHERE state = 'completed'`)
	el := time.Since(start)
	report("River", before, snapshot(ctx, db, nil), o.n, "job")
	fmt.Printf("   River: PostgreSQL %s\n", pgWaits.summary())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return float64(o.n) / el.Seconds(), errors.Join(err, client.Stop(sctx))
}
