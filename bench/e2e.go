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
	"github.com/redis/go-redis/v9"
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
	v, err := newVerifications(ctx, db, wss)
	if err != nil {
		return 0, err
	}

	// The commands: an operation, a verification task and its request event, committed
	// together, 100 commands per transaction, 8 committers.
	start := time.Now()
	n := o.n / 100 * 100
	batches := make([]verifyBatch, n/100)
	for i := range batches {
		batches[i] = verifyBatch{ws: wss[i%len(wss)], k: 100}
	}
	if err := v.commitAll(ctx, batches); err != nil {
		return 0, err
	}
	fmt.Printf("   ours: %d commands committed in %s (not timed below)\n", n, time.Since(start).Round(time.Millisecond))

	var handled atomic.Int64 // jobs whose lifecycle ended in success (the record committed)
	// Fair share as the service runs it by default: FAIR_SHARE_SLOTS unset, the workers'
	// concurrency as WORKER_CONCURRENCY.
	fair := outbox.FairShare{Slots: config.FairShareFactor * o.workers, AloneFactor: outbox.DefaultAloneFactor, Queues: fairQueues(), LaneField: "store_id"}
	p, err := v.pipeline(ctx, o, outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true, FairShare: fair},
		func(ctx context.Context, job worker.Job, handle worker.Handler) error {
			err := handle.Handle(ctx, job)
			if err == nil {
				handled.Add(1)
			}
			return err
		})
	if err != nil {
		return 0, err
	}
	defer p.close()
	if o.console > 0 {
		stop, err := watchConsole(ctx, o, db, p.rdb, p.prefix)
		if err != nil {
			return 0, err
		}
		defer stop()
	}
	before := countOutbox(ctx, db, snapshot(ctx, db, p.rdb))
	pgWaits := sampleWaits(ctx, db)
	start = time.Now()
	stop := p.run(ctx)
	err = waitDone(ctx, db, handled.Load, n, `SELECT count(*) FROM store_verifications WHERE status = 'succeeded'`)
	el := time.Since(start)
	report("ours", before, countOutbox(ctx, db, snapshot(ctx, db, p.rdb)), n, "job")
	fmt.Printf("   ours: PostgreSQL %s\n", pgWaits.summary())
	stop()
	return float64(n) / el.Seconds(), err
}

// verifications commits store verifications (an operation, the task and its request event)
// in a scratch database, one verified sandbox store per workspace, and runs them through our
// pipeline with a no-op call.
type verifications struct {
	db     *scratch
	stores map[uuid.UUID]domain.Store
	events *outbox.EventPublisher
	ops    *postgres.Repository[domain.Operation]
	tasks  postgres.StoreVerifications
}

func newVerifications(ctx context.Context, db *scratch, wss []uuid.UUID) (*verifications, error) {
	v := &verifications{db: db, stores: map[uuid.UUID]domain.Store{}, ops: postgres.NewOperations(), tasks: postgres.NewStoreVerifications()}
	for _, ws := range wss {
		s := domain.Store{ID: uuid.New(), WorkspaceID: ws, CredentialsVersion: 1}
		if _, err := db.Owner.Exec(ctx, `INSERT INTO stores (id, workspace_id, platform, shop_id, name, status)
			VALUES ($1, $2, 'sandbox', $3, 'bench', 'verified')`, s.ID, ws, s.ID.String()); err != nil {
			return nil, err
		}
		v.stores[ws] = s
	}
	var err error
	v.events, err = outbox.NewEventPublisher(outbox.PublisherConfig{Routes: outbox.Routes(flows.Routes())})
	return v, err
}

// commit commits k verifications of ws in one transaction and returns their task ids.
func (v *verifications) commit(ctx context.Context, ws uuid.UUID, k int) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	err := postgres.InTx(ctx, v.db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		ids = ids[:0]
		now := time.Now()
		for range k {
			op := domain.NewOperation(ws, uuid.Nil, "store.verify", "store", v.stores[ws].ID, now)
			t := domain.NewStoreVerification(uuid.New(), ws, op.ID, v.stores[ws], now)
			if err := v.ops.Insert(ctx, op); err != nil {
				return err
			}
			if err := v.tasks.Insert(ctx, t); err != nil {
				return err
			}
			if err := v.events.Publish(ctx, t.RequestEvent()); err != nil {
				return err
			}
			ids = append(ids, t.ID)
		}
		return nil
	})
	return ids, err
}

// verifyBatch is one transaction of commitAll: k verifications of ws.
type verifyBatch struct {
	ws uuid.UUID
	k  int
}

// commitAll commits the batches with 8 committers.
func (v *verifications) commitAll(ctx context.Context, batches []verifyBatch) error {
	work := make(chan verifyBatch)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var commitErr error
	for range 8 {
		wg.Go(func() {
			for b := range work {
				if _, err := v.commit(ctx, b.ws, b.k); err != nil {
					mu.Lock()
					commitErr = errors.Join(commitErr, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, b := range batches {
		work <- b
	}
	close(work)
	wg.Wait()
	return commitErr
}

// pipeline is our delivery of the verifications: a dispatcher (dcfg) and a Runner of
// o.workers under a BullMQ prefix of its own (deleted by close).
type pipeline struct {
	rdb    *redis.Client
	prefix string // the queues' and the event stream's prefix in rdb
	d      *outbox.Dispatcher
	runner *jobs.Runner
	closes []func()
}

// pipeline builds the dispatcher and the Runner; each job goes through wrap, which calls
// handle (the verification's flow: begin and record transactions as in production, a no-op
// call).
func (v *verifications) pipeline(ctx context.Context, o options, dcfg outbox.DispatcherConfig,
	wrap func(ctx context.Context, job worker.Job, handle worker.Handler) error) (*pipeline, error) {
	p := &pipeline{}
	fail := func(err error) (*pipeline, error) { p.close(); return nil, err }
	cfg, err := config.Load()
	if err != nil {
		return nil, err
	}
	// The queues and the integration event stream under a prefix of the run's own, deleted
	// after it.
	cfg.RedisURL, cfg.BullMQPrefix = o.redisURL, "bench-"+randomHex(4)
	cfg.StreamPrefix, p.prefix = cfg.BullMQPrefix, cfg.BullMQPrefix
	if p.rdb, err = newRedis(ctx, o.redisURL, 4*o.workers); err != nil {
		return nil, err
	}
	p.closes = append(p.closes, func() { _ = p.rdb.Close() }, func() { deletePrefix(p.rdb, cfg.BullMQPrefix) })
	log := slog.New(slog.DiscardHandler)
	bcfg := listing.ProvideBullMQConfig(cfg, p.rdb)
	pubs, closePubs, err := listing.ProvidePublishers(cfg, bcfg, &listing.Queues{}, log)
	if err != nil {
		return fail(err)
	}
	p.closes = append(p.closes, closePubs)
	if p.d, err = outbox.NewDispatcher(dcfg, v.db.App, pubs, log, nil); err != nil {
		return fail(err)
	}
	transport, err := jobs.NewBullMQ(bullmq.SubscriberConfig{Config: bcfg, Concurrency: o.workers, Name: "bench"}, nil)
	if err != nil {
		return fail(err)
	}
	p.closes = append(p.closes, func() { _ = transport.Close() })
	deps := worker.Deps{Tx: postgres.Transactor{Pool: v.db.App}, Operations: v.ops, Events: v.events, Now: time.Now,
		Guards: postgres.TaskGuards{Tables: flows.TaskTables()}}
	kind := storeverify.Tasks(deps, v.tasks)
	flow := worker.Flow[domain.StoreVerification, struct{}, struct{}]{Kind: kind,
		Call: func(context.Context, domain.StoreVerification, struct{}, worker.Tx) (struct{}, error) {
			return struct{}{}, nil
		},
		Record: func(context.Context, *domain.StoreVerification, struct{}) (any, error) {
			return map[string]any{}, nil
		}}
	h := worker.HandlerFunc(func(ctx context.Context, job worker.Job) error { return wrap(ctx, job, flow) })
	// As the service does with fair share on (ProvideRunner): a task's end wakes the
	// dispatcher for its workspace.
	var ended func(string, worker.Job)
	if dcfg.FairShare.Slots > 0 {
		wake := v.events.TaskEnded(v.db.App)
		ended = func(_ string, job worker.Job) { wake(job.WorkspaceID) }
	}
	p.runner, err = jobs.NewRunner(jobs.Config{Transport: transport, Concurrency: o.workers, Logger: log, TaskEnded: ended,
		Handlers: map[string]worker.Handler{worker.QueueStoreVerification: h},
		Kinds:    map[string]worker.TaskKind{worker.QueueStoreVerification: kind}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		return fail(err)
	}
	return p, nil
}

// run starts the dispatcher and the Runner; the function it returns stops them and waits.
func (p *pipeline) run(ctx context.Context) (stop func()) {
	rctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	running.Go(func() { _ = p.d.Run(rctx) })
	running.Go(func() { _ = p.runner.Run(rctx) })
	return func() { cancel(); running.Wait() }
}

// close releases what pipeline opened, the last first.
func (p *pipeline) close() {
	for i := len(p.closes) - 1; i >= 0; i-- {
		p.closes[i]()
	}
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
