package listing

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/reconcile"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/infra/ai"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/fetch"
	"github.com/listingkit/listing/infra/imaging"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/infra/metrics"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/platform"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/ratelimit"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
)

// sandboxAIKey is the AI key used against the development AI sandbox.
const sandboxAIKey = "sk-sandbox-development"

// Externals are the external systems workers call, and the development sandboxes started
// in their place when no base URL is configured.
type Externals struct {
	Marketplace port.Marketplace
	AI          port.AIProvider
	// MarketplaceSandbox and AISandbox are set when the sandbox runs in this process.
	MarketplaceSandbox *marketplace.Sandbox
	AISandbox          *aiprovider.Sandbox
	// MarketplaceURL and AIURL are the base URLs in use.
	MarketplaceURL, AIURL string
}

// ProvideExternals builds the marketplace and AI adapters, starting the sandboxes when
// PLATFORM_BASE_URL / AI_BASE_URL are unset (never in production: config refuses it).
func ProvideExternals(cfg config.Config, log *slog.Logger) (*Externals, func(), error) {
	var closers []io.Closer
	cleanup := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	x := &Externals{MarketplaceURL: cfg.PlatformBaseURL, AIURL: cfg.AIBaseURL}
	aiKey := cfg.AIAPIKey
	if x.MarketplaceURL == "" {
		sb, err := marketplace.New(marketplace.Config{Logger: log, Rate: cfg.SandboxMarketplaceRate})
		if err != nil {
			return nil, nil, err
		}
		srv, err := sandbox.Start(cfg.SandboxMarketplaceAddr, sb)
		if err != nil {
			return nil, nil, fmt.Errorf("marketplace sandbox: %w", err)
		}
		closers = append(closers, srv)
		x.MarketplaceSandbox, x.MarketplaceURL = sb, srv.URL
		log.Info("marketplace sandbox started (PLATFORM_BASE_URL is unset)", "url", srv.URL)
	}
	if x.AIURL == "" {
		sb, err := aiprovider.New(aiprovider.Config{APIKeys: []string{sandboxAIKey}, Logger: log})
		if err != nil {
			cleanup()
			return nil, nil, err
		}
		srv, err := sandbox.Start(cfg.SandboxAIAddr, sb)
		if err != nil {
			cleanup()
			return nil, nil, fmt.Errorf("AI sandbox: %w", err)
		}
		closers = append(closers, srv)
		x.AISandbox, x.AIURL, aiKey = sb, srv.URL, sandboxAIKey
		log.Info("AI sandbox started (AI_BASE_URL is unset)", "url", srv.URL)
	}
	mp, err := platform.New(platform.Config{BaseURL: x.MarketplaceURL, Timeout: cfg.PlatformTimeout, Logger: log})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	aic, err := ai.New(ai.Config{BaseURL: x.AIURL, APIKey: aiKey, TextModel: cfg.AITextModel, Timeout: cfg.AITimeout, Logger: log})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	x.Marketplace, x.AI = mp, aic
	return x, cleanup, nil
}

// ProvideWorkerDeps builds what every job handler and task kind shares, the declared guards
// (sql/060_task_guards.sql) of every registered flow's tasks included.
func ProvideWorkerDeps(pool *pgxpool.Pool, repos *Repositories, events *outbox.EventPublisher, log *slog.Logger) worker.Deps {
	return worker.Deps{Tx: postgres.Transactor{Pool: pool}, Operations: repos.Operations, Events: events, Now: time.Now, Log: log,
		Guards: postgres.TaskGuards{Tables: flows.TaskTables()}}
}

// TaskKinds describes the task of every queue to the engine.
type TaskKinds []worker.TaskKind

// provided are the dependencies this process offers the flows' builders (worker.Register):
// the repositories, the shared worker dependencies and settings, and, in a process that
// consumes jobs, the cipher, the storage, the fetcher, the external systems and the stores'
// budgets (nil otherwise, so a flow that needs them there is refused by name).
func provided(cfg config.Config, deps worker.Deps, repos *Repositories, cipher *secret.Cipher, store *Storage,
	fetcher *fetch.Fetcher, x *Externals, budget *worker.StoreBudget) worker.Provided {
	values := []any{deps, worker.Settings{PlatformTimeout: cfg.PlatformTimeout, AITimeout: cfg.AITimeout, MediaMaxBytes: cfg.MediaMaxBytes,
		MediaDecodes: cfg.MediaDecodeConcurrency, AITextModel: cfg.AITextModel},
		repos.Products, repos.Stores, repos.Verifications, repos.Media, repos.MediaTasks, repos.Transfers,
		repos.Publications, repos.Syncs, repos.AITasks, repos.AILedger, repos.Updates}
	for _, r := range repos.Tasks {
		values = append(values, r)
	}
	if cipher != nil {
		values = append(values, port.CredentialCipher(cipher))
	}
	if store != nil {
		values = append(values, store.ObjectStorage, port.InspectImageFunc(inspectImage(cfg.MediaDecodeMaxBytes)))
	}
	if fetcher != nil {
		values = append(values, port.Fetcher(fetcher))
	}
	if x != nil {
		values = append(values, x.Marketplace, x.AI)
	}
	if budget != nil {
		values = append(values, budget)
	}
	return worker.Provide(values...)
}

// ProvideTaskKinds builds the task kind of every registered flow (flows.Kinds).
func ProvideTaskKinds(cfg config.Config, deps worker.Deps, repos *Repositories) (TaskKinds, error) {
	m, err := flows.Kinds(provided(cfg, deps, repos, nil, nil, nil, nil, nil))
	if err != nil {
		return nil, err
	}
	kinds := make(TaskKinds, 0, len(m))
	for _, q := range flows.Queues() {
		kinds = append(kinds, m[q])
	}
	return kinds, nil
}

// byQueue indexes kinds by queue.
func byQueue(kinds TaskKinds) map[string]worker.TaskKind {
	out := map[string]worker.TaskKind{}
	for _, k := range kinds {
		out[k.Queue()] = k
	}
	return out
}

// ProvideReconciler builds the reconciler of stuck tasks (app/reconcile), refusing to start
// without a task kind of every registered flow (flows.Check).
func ProvideReconciler(cfg config.Config, pool *pgxpool.Pool, session SessionPool, bcfg bullmq.Config, kinds TaskKinds, reg *prometheus.Registry,
	log *slog.Logger) (*reconcile.Reconciler, error) {
	if err := flows.Check(byQueue(kinds), nil); err != nil {
		return nil, err
	}
	var probe port.JobProbe
	if !cfg.Memory() {
		probe = jobs.BullMQProbe{Config: bcfg}
	}
	return reconcile.New(reconcile.Config{Kinds: kinds, Stuck: postgres.StuckTasks{Pool: pool, Session: session.Pool, Tables: flows.TaskTables()}, Tx: postgres.Transactor{Pool: pool},
		Probe: probe,
		After: cfg.ReconcileAfterQueues, DefaultAfter: cfg.ReconcileAfter, Interval: cfg.ReconcileInterval,
		MaxReconciliations: cfg.ReconcileMax, MaxAge: cfg.TaskMaxAge, Log: log, Registerer: reg})
}

// ProvideJobHandlers builds one handler per queue. A process calls it once: the media
// handler's decode slots (MEDIA_DECODE_CONCURRENCY) bound the whole process.
func ProvideJobHandlers(cfg config.Config, deps worker.Deps, repos *Repositories, cipher *secret.Cipher, store *Storage,
	fetcher *fetch.Fetcher, x *Externals, budget *worker.StoreBudget) (map[string]worker.Handler, error) {
	return flows.Handlers(provided(cfg, deps, repos, cipher, store, fetcher, x, budget))
}

// RatePrefix starts the Redis keys of the stores' buckets and of their waits' log
// (ratelimit.Redis, ratelimit.WaitLog).
func RatePrefix(cfg config.Config) string { return cfg.StreamPrefix + ":rate:" }

// ProvideStoreBudget builds the stores' budgets of requests to their marketplaces
// (STORE_RATE_LIMITS and each store's own), in Redis, shared by every worker process; waits
// are counted in listing_store_rate_waits_total{platform} and, per minute for the console,
// in Redis (ratelimit.WaitLog, under the buckets' prefix).
func ProvideStoreBudget(cfg config.Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*worker.StoreBudget, error) {
	var err error
	waits := metrics.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "listing_store_rate_waits_total",
		Help: "Jobs that waited (delayed, nothing spent) because their store was over its rate limit, by platform."},
		[]string{"platform"}), &err)
	if err != nil {
		return nil, err
	}
	for _, p := range cfg.Platforms {
		waits.WithLabelValues(p)
	}
	prefix := RatePrefix(cfg)
	waitLog := ratelimit.WaitLog{Client: rdb, Prefix: prefix}
	return &worker.StoreBudget{Buckets: ratelimit.Redis{Client: rdb, Prefix: prefix}, Platforms: cfg.StoreRateLimits,
		Waited: func(ctx context.Context, platform string) {
			waits.WithLabelValues(platform).Inc()
			// The console's count only: a wait it misses changes nothing else.
			if err := waitLog.Add(ctx, platform, time.Now()); err != nil && ctx.Err() == nil {
				log.Warn("store rate wait not counted for the console", "platform", platform, "error", err)
			}
		}}, nil
}

// inspectImage inspects and decodes an original with imaging within the decode budget
// maxDecode; the result derives the default variants from the decoded pixels.
func inspectImage(maxDecode int64) port.InspectImageFunc {
	return func(r io.Reader, maxBytes int64) (port.InspectedImage, error) {
		im, err := imaging.Inspect(r, imaging.Limits{MaxBytes: maxBytes, MaxDecodeBytes: maxDecode})
		if err != nil {
			return port.InspectedImage{}, err
		}
		derive := func() ([]port.ImageVariant, error) {
			ds, err := im.Derive(imaging.DefaultVariants)
			if err != nil {
				return nil, err
			}
			out := make([]port.ImageVariant, len(ds))
			for i, d := range ds {
				out[i] = port.ImageVariant(d)
			}
			return out, nil
		}
		return port.InspectedImage{Info: port.ImageInfo(im.Info), Data: im.Data, DeriveFunc: derive}, nil
	}
}

// ProvideTransport builds the transport the workers consume: BullMQ, or the process's
// memory queues (QUEUE_TRANSPORT=memory), whose retries go back through the outbox.
func ProvideTransport(cfg config.Config, bcfg bullmq.Config, q *Queues, pool *pgxpool.Pool, log *slog.Logger) (jobs.Transport, func(), error) {
	if q.Memory != nil {
		take := func(ctx context.Context, job worker.Job, claim string, lease time.Duration) error {
			return outbox.Take(ctx, pool, job.WorkspaceID, job.ID, claim, lease)
		}
		requeue := func(ctx context.Context, job worker.Job, claim string, after time.Duration, next outbox.JobDelivery) error {
			return outbox.Requeue(ctx, pool, job.WorkspaceID, job.ID, claim, after, next)
		}
		return jobs.NewMemory(q.Memory, jobs.MemoryConfig{Attempts: cfg.JobAttempts, Backoff: config.JobRetryDelay,
			Lease: cfg.MemoryLease(), Take: take, Requeue: requeue, Logger: log}), func() {}, nil
	}
	maxStalls := cfg.JobMaxStalls
	if maxStalls == 0 {
		maxStalls = -1 // bullmq's "fail on the first stall"
	}
	// The Runner decides when a handler is cut short (WORKER_STOP_TIMEOUT); the worker waits
	// a little longer for it to settle.
	t, err := jobs.NewBullMQ(bullmq.SubscriberConfig{Config: bcfg, Concurrency: cfg.WorkerConcurrency, Name: "listing",
		LockDuration: cfg.JobLockDuration, StalledInterval: cfg.JobStalledInterval, MaxStalledCount: maxStalls,
		ShutdownTimeout: cfg.WorkerStopTimeout + 5*time.Second}, log)
	if err != nil {
		return nil, nil, err
	}
	return t, func() { _ = t.Close() }, nil
}

// ProvideRunner builds the consumers of every queue, refusing to start without a handler and
// a task kind of every registered flow (flows.Check); their metrics (job outcomes, handler
// time, queue depth) are registered on reg. With fair share on (FAIR_SHARE_SLOTS), the end
// of a request queue's task wakes the dispatchers for its workspace (the slot it freed).
func ProvideRunner(cfg config.Config, transport jobs.Transport, handlers map[string]worker.Handler, kinds TaskKinds,
	pool *pgxpool.Pool, events *outbox.EventPublisher, reg *prometheus.Registry, log *slog.Logger) (*jobs.Runner, error) {
	if err := flows.Check(byQueue(kinds), handlers); err != nil {
		return nil, err
	}
	slots, err := cfg.FairSlots()
	if err != nil {
		return nil, err
	}
	var ended func(string, worker.Job)
	if slots > 0 {
		fair := map[string]bool{}
		for _, q := range fairQueues() {
			fair[q.Queue] = true
		}
		wake := events.TaskEnded(pool)
		ended = func(queue string, job worker.Job) {
			if fair[queue] {
				wake(job.WorkspaceID)
			}
		}
	}
	var timeout time.Duration
	if cfg.Memory() {
		// A handler holds its outbox event for the lease from when it is taken: it must
		// finish, and its calls end, within it (MemoryLease covers the calls).
		timeout = jobs.HandlerTimeout(cfg.MemoryLease())
	}
	return jobs.NewRunner(jobs.Config{Transport: transport, Concurrency: cfg.WorkerConcurrency, Handlers: handlers,
		Kinds: byQueue(kinds), JobTimeout: timeout, ShutdownTimeout: cfg.WorkerStopTimeout, TaskEnded: ended, Logger: log, Registerer: reg})
}

// Work is the assembled job consumers.
type Work struct {
	Runner    *jobs.Runner
	Externals *Externals
	// Pool and Redis are the process's connections, for its readiness checks.
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
}

// Run consumes jobs until ctx ends.
func (w *Work) Run(ctx context.Context) error { return w.Runner.Run(ctx) }
