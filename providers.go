// Package listing assembles the service: the providers below build each collaborator from
// config.Config, and the google/wire injectors in wire.go (generated into wire_gen.go)
// connect them. cmd/app calls the injectors; tests call them too, so that tests run the
// service exactly as it is assembled in production.
package listing

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/go-chi/chi/v5"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/app/reconcile"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/auth"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/commandstream"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/eventstream"
	"github.com/listingkit/listing/infra/fetch"
	"github.com/listingkit/listing/infra/httpapi"
	"github.com/listingkit/listing/infra/idem"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/infra/metrics"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/ratelimit"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/infra/secret"
	"github.com/listingkit/listing/infra/storage"
)

// Options are assembly choices that are not configuration: tests use them to trade cost for
// speed. The zero value is production.
type Options struct {
	// FastPasswordHashing uses cheap argon2id parameters (tests only).
	FastPasswordHashing bool
}

// NewRegistry returns a Prometheus registry with the Go and process collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ProvidePool opens the app_user pool; reg receives the counts of its statements and round
// trips.
func ProvidePool(ctx context.Context, cfg config.Config, reg *prometheus.Registry) (*pgxpool.Pool, func(), error) {
	stmts, err := postgres.NewStatements(reg)
	if err != nil {
		return nil, nil, err
	}
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.DatabaseMaxConns, Statements: stmts,
		TransactionPooling: cfg.TransactionPooling()})
	if err != nil {
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

// SessionPool is the app_user pool for what needs a session beyond one transaction (a
// session-level advisory lock): the pool of DATABASE_SESSION_URL with
// DATABASE_POOL_MODE=transaction, else the service's pool itself.
type SessionPool struct{ *pgxpool.Pool }

// ProvideSessionPool opens the session pool (two connections) when DATABASE_URL goes
// through a pooler in transaction mode; the cleanup closes it.
func ProvideSessionPool(ctx context.Context, cfg config.Config, pool *pgxpool.Pool) (SessionPool, func(), error) {
	if !cfg.TransactionPooling() {
		return SessionPool{pool}, func() {}, nil
	}
	session, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.DatabaseSessionURL, MaxConns: 2})
	if err != nil {
		return SessionPool{}, nil, fmt.Errorf("DATABASE_SESSION_URL: %w", err)
	}
	return SessionPool{session}, session.Close, nil
}

// ProvideRedis opens the Redis client of the queues: a cluster client when
// REDIS_CLUSTER_ADDRS is set, else a client of REDIS_URL. The cleanup closes it.
func ProvideRedis(ctx context.Context, cfg config.Config) (redis.UniversalClient, func(), error) {
	client, err := newRedisClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	return client, func() { _ = client.Close() }, nil
}

// newRedisClient returns a new Redis client of cfg, which the caller closes: a
// *redis.ClusterClient of REDIS_CLUSTER_ADDRS (with REDIS_URL's credentials and TLS) when
// set, else a *redis.Client of REDIS_URL.
func newRedisClient(cfg config.Config) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: invalid (details withheld: they may contain a password)")
	}
	if len(cfg.RedisClusterAddrs) == 0 {
		return redis.NewClient(opts), nil
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisClusterAddrs, Username: opts.Username,
		Password: opts.Password, TLSConfig: opts.TLSConfig}), nil
}

// ProvideTokens builds the access-token issuer.
func ProvideTokens(cfg config.Config, log *slog.Logger) (*auth.Tokens, error) {
	spec, dev := config.Keys(cfg.AuthTokenKeys, "auth-token")
	if dev {
		warnOnce(log, "AUTH_TOKEN_KEYS is unset: using the public development signing key")
	}
	keys, err := auth.ParseKeys(spec)
	if err != nil {
		return nil, fmt.Errorf("AUTH_TOKEN_KEYS: %w", err)
	}
	return auth.NewTokens(keys, cfg.AccessTokenTTL, time.Now)
}

// ProvideHasher builds the password hasher.
func ProvideHasher(opts Options) auth.Hasher {
	if opts.FastPasswordHashing {
		return auth.Hasher{Params: auth.FastHashParams}
	}
	return auth.Hasher{Params: auth.DefaultHashParams}
}

// ProvideIdempotency builds the idempotency guard (infra/idem).
func ProvideIdempotency(cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*idem.Guard, error) {
	spec, dev := config.Keys(cfg.FingerprintKeys, "idempotency-fingerprint")
	if dev {
		warnOnce(log, "FINGERPRINT_KEYS is unset: using the public development fingerprint key")
	}
	keys, err := idem.ParseKeys(spec)
	if err != nil {
		return nil, fmt.Errorf("FINGERPRINT_KEYS: %w", err)
	}
	metrics, err := idem.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return idem.New(idem.NewStore(), idem.Config{Keys: keys, Retention: cfg.IdempotencyRetention, Metrics: metrics})
}

// warned holds the warnings this process logged already (warnOnce).
var warned sync.Map

// warnOnce logs msg as a warning the first time this process asks, and never again: the
// injectors of `all` build some providers twice (the API's and the workers'), and a
// development-key warning is one fact about the process.
func warnOnce(log *slog.Logger, msg string) {
	if _, seen := warned.LoadOrStore(msg, true); !seen {
		log.Warn(msg)
	}
}

// ProvideBus builds the command bus: logging/metrics → RLS transaction → idempotency.
func ProvideBus(pool *pgxpool.Pool, guard *idem.Guard, reg *prometheus.Registry, log *slog.Logger) (*bus.Bus, error) {
	m, err := bus.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	// commandstream.Guard checks, in the transaction, that a command sent as a message still
	// comes from a live integration (HTTP commands pass through).
	return bus.New(bus.Observe(log, m), postgres.TxMiddleware(pool, guard.Opening), commandstream.Guard(), guard.Middleware(), commandstream.Expiry()), nil
}

// Storage is the object storage and, for local storage, the upload endpoint it needs.
type Storage struct {
	port.ObjectStorage
	// Uploads serves PUT /v1/uploads/{token} for local storage; nil with S3.
	Uploads http.Handler
}

// ProvideStorage builds S3 storage when S3_BUCKET is set, else local storage in STORAGE_DIR.
func ProvideStorage(ctx context.Context, cfg config.Config, log *slog.Logger) (*Storage, error) {
	if cfg.S3Bucket != "" {
		s3, err := storage.NewS3(ctx, storage.S3Config{Endpoint: cfg.S3Endpoint, Region: cfg.S3Region, Bucket: cfg.S3Bucket,
			AccessKeyID: cfg.S3AccessKeyID, SecretAccessKey: cfg.S3SecretAccessKey, UsePathStyle: cfg.S3UsePathStyle})
		if err != nil {
			return nil, err
		}
		return &Storage{ObjectStorage: s3}, nil
	}
	spec := cfg.UploadSigningKey
	if spec == "" {
		spec = strings.TrimPrefix(config.DevKey("upload-signing"), "dev:")
		warnOnce(log, "UPLOAD_SIGNING_KEY is unset: using the public development signing key")
	}
	key, err := storage.DecodeSigningKey(spec)
	if err != nil {
		return nil, fmt.Errorf("UPLOAD_SIGNING_KEY: %w", err)
	}
	local, err := storage.NewLocal(storage.LocalConfig{Dir: cfg.StorageDir, PublicBaseURL: cfg.PublicBaseURL,
		UploadPath: "/v1/uploads/", UploadSigningKey: key, Logger: log})
	if err != nil {
		return nil, err
	}
	return &Storage{ObjectStorage: local, Uploads: local.UploadHandler(storage.UploadHandlerConfig{})}, nil
}

// ProvideFetcher builds the SSRF-guarded material fetcher.
func ProvideFetcher(cfg config.Config, log *slog.Logger) (*fetch.Fetcher, error) {
	if cfg.FetchAllowPrivate {
		warnOnce(log, "FETCH_ALLOW_PRIVATE=true: material transfers may reach private, loopback and link-local addresses (development only)")
	}
	prefixes := cfg.FetchAllowPrefixes
	if len(prefixes) == 0 && !cfg.Production() && cfg.PlatformBaseURL == "" {
		// development: the marketplace sandbox's sample files (the walkthrough's transfer)
		prefixes = []string{"http://" + cfg.SandboxMarketplaceAddr + marketplace.FilesPath}
	}
	return fetch.New(fetch.Config{AllowPrivate: cfg.FetchAllowPrivate, AllowURLPrefixes: prefixes, Timeout: cfg.FetchTimeout,
		DefaultMaxBytes: cfg.MediaMaxBytes, Logger: log})
}

// ProvideCipher builds the credential cipher.
func ProvideCipher(cfg config.Config, log *slog.Logger) (*secret.Cipher, error) {
	spec, dev := config.Keys(cfg.CredentialsKeys, "credentials")
	if dev {
		warnOnce(log, "CREDENTIALS_KEYS is unset: using the public development key")
	}
	return secret.New(secret.Config{Keys: spec, RequireKeys: cfg.Production(), Logger: log})
}

// ProvideEventPublisher builds the outbox's write side with the routing of every event. With
// the bullmq transport it wakes dispatchers of other processes after each commit through
// Redis (outbox.Wakeup on wakeChannel); a dispatcher of the same process is woken directly.
func ProvideEventPublisher(cfg config.Config, rdb redis.UniversalClient, log *slog.Logger) (*outbox.EventPublisher, func(), error) {
	pcfg := outbox.PublisherConfig{Routes: outbox.Routes(flows.Routes())}
	cleanup := func() {}
	if !cfg.Memory() {
		w, err := outbox.NewWakeup(outbox.WakeupConfig{Redis: rdb, Channel: wakeChannel(cfg), Logger: log})
		if err != nil {
			return nil, nil, err
		}
		pcfg.Signal, cleanup = w, w.Close
	}
	p, err := outbox.NewEventPublisher(pcfg)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	return p, cleanup, nil
}

// wakeChannel is the Redis channel of the outbox wake-ups of this deployment.
func wakeChannel(cfg config.Config) string { return cfg.BullMQPrefix + ":outbox-wakeup" }

// Repositories are the PostgreSQL repositories, stateless and shared.
type Repositories struct {
	Accounts      postgres.Accounts
	Products      postgres.Products
	Operations    *postgres.Repository[domain.Operation]
	Stores        postgres.Stores
	Verifications postgres.StoreVerifications
	Media         *postgres.Repository[domain.Media]
	MediaTasks    *postgres.Repository[domain.MediaTask]
	Transfers     *postgres.Repository[domain.MaterialTransfer]
	Publications  postgres.Publications
	Syncs         postgres.ProductSyncs
	AITasks       *postgres.Repository[domain.AITask]
	AILedger      postgres.AILedger
	Updates       postgres.ListingUpdates
	Integrations  postgres.Integrations
	// Tasks are the task repositories read by table (query.Queries' Tasks); their values
	// are also offered to the flows' builders (worker.Provided).
	Tasks map[string]any
}

// ProvideRepositories builds the repositories.
func ProvideRepositories() *Repositories {
	tasks := postgres.TaskRepositories()
	return &Repositories{Operations: postgres.NewOperations(), Stores: postgres.NewStores(),
		Verifications: postgres.NewStoreVerifications(), Media: postgres.NewMedia(), MediaTasks: postgres.NewMediaTasks(),
		Transfers: postgres.NewMaterialTransfers(), Publications: postgres.NewPublications(), Syncs: postgres.NewProductSyncs(),
		AITasks: postgres.NewAITasks(), Updates: tasks["listing_updates"].(postgres.ListingUpdates), Integrations: postgres.NewIntegrations(),
		Tasks: tasks}
}

// ProvideApplication builds the catalogue of commands and queries.
func ProvideApplication(cfg config.Config, b *bus.Bus, pool *pgxpool.Pool, hasher auth.Hasher, tokens *auth.Tokens,
	repos *Repositories, events *outbox.EventPublisher, cipher *secret.Cipher, store *Storage, fetcher *fetch.Fetcher) (*app.Application, error) {
	now := port.Clock(time.Now)
	dummy, err := hasher.Hash("dummy password for timing")
	if err != nil {
		return nil, err
	}
	flow := commands.FlowDeps{Operations: repos.Operations, Events: events, Now: now}
	accounts := repos.Accounts
	kinds, err := flows.Kinds(provided(cfg, worker.Deps{Tx: postgres.Transactor{Pool: pool}, Operations: repos.Operations,
		Events: events, Now: time.Now, Guards: postgres.TaskGuards{Tables: flows.TaskTables()}}, repos, nil, nil, nil, nil, nil))
	if err != nil {
		return nil, err
	}
	return &app.Application{
		Bus: b,
		Commands: app.Commands{
			Start: worker.Starts{Kinds: kinds},

			RegisterUser:     commands.NewRegisterUserHandler(accounts, accounts, hasher, tokens, now),
			Login:            commands.NewLoginHandler(accounts, accounts, hasher, tokens, now, dummy),
			RefreshSession:   commands.NewRefreshSessionHandler(accounts, tokens, now),
			CreateProduct:    commands.NewCreateProductHandler(repos.Products, now),
			SaveProductDraft: commands.NewSaveProductDraftHandler(repos.Products, now),

			CreateStore:               commands.NewCreateStoreHandler(flow, repos.Stores, repos.Verifications, cipher, cfg.Platforms),
			ReplaceStoreAuthorization: commands.NewReplaceStoreAuthorizationHandler(flow, repos.Stores, repos.Verifications, cipher),
			VerifyStore:               commands.NewVerifyStoreHandler(flow, repos.Stores, repos.Verifications),
			SetStoreRateLimit:         commands.NewSetStoreRateLimitHandler(repos.Stores, now),
			CreateMedia:               commands.NewCreateMediaHandler(repos.Media, store, now, cfg.MediaMaxBytes, time.Hour),
			CompleteMediaUpload:       commands.NewCompleteMediaUploadHandler(flow, repos.Media, repos.MediaTasks),
			CreateMaterialTransfer:    commands.NewCreateMaterialTransferHandler(flow, repos.Transfers),
			PublishProduct:            commands.NewPublishProductHandler(flow, repos.Products, repos.Stores, repos.Publications),
			SyncStoreProducts:         commands.NewSyncStoreProductsHandler(flow, repos.Stores, repos.Syncs),
			CreateAITask:              commands.NewCreateAITaskHandler(flow, repos.Products, repos.AITasks),
			UpdateListing:             commands.NewUpdateListingHandler(flow, repos.Products, repos.Publications, repos.Updates),
			UnpublishPublication: commands.NewUnpublishPublicationHandler(flow, repos.Publications,
				repos.Tasks["unpublishes"].(port.Repository[domain.Unpublish])),

			CancelOperation: commands.NewCancelOperationHandler(repos.Operations, operationCancels(kinds)),

			CreateIntegration: commands.NewCreateIntegrationHandler(accounts, repos.Integrations, cipher, now),
			RevokeIntegration: commands.NewRevokeIntegrationHandler(accounts, repos.Integrations, now),
		},
		Queries: query.Queries{Tx: postgres.Transactor{Pool: pool}, Accounts: accounts, Products: repos.Products,
			Operations: repos.Operations, Stores: repos.Stores, Verifications: repos.Verifications, Media: repos.Media, Transfers: repos.Transfers,
			Publications: repos.Publications, Syncs: repos.Syncs, AITasks: repos.AITasks,
			Tasks: taskReaders(repos.Tasks), Storage: store, Fetcher: fetcher, Principals: repos.Integrations},
	}, nil
}

// operationCancels cancels operations through the flows' task kinds (built as in every
// process that runs the engine: ProvideTaskKinds).
func operationCancels(kinds map[string]worker.TaskKind) worker.Cancels {
	queues := map[string]string{}
	for _, s := range flows.All() {
		queues[s.Operation] = s.Queue
	}
	return worker.Cancels{Queues: queues, Kinds: kinds, Tasks: postgres.OperationTasks{Tables: flows.TaskTables()}}
}

// taskReaders are the task repositories that read tasks under their parent.
func taskReaders(tasks map[string]any) map[string]port.TaskReader {
	out := map[string]port.TaskReader{}
	for table, r := range tasks {
		if tr, ok := r.(port.TaskReader); ok {
			out[table] = tr
		}
	}
	return out
}

// ProvideHTTP builds the HTTP API, with the process's password-hashing slots
// (PASSWORD_HASH_CONCURRENCY, PASSWORD_HASH_WAIT): a process builds one API.
func ProvideHTTP(cfg config.Config, application *app.Application, tokens *auth.Tokens, guard *idem.Guard, store *Storage,
	pool *pgxpool.Pool, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*httpapi.Server, error) {
	var extra func(chi.Router)
	if store.Uploads != nil {
		extra = func(r chi.Router) { r.Put("/uploads/{token}", store.Uploads.ServeHTTP) }
	}
	ready := []httpapi.ReadinessCheck{{Name: "postgres", Check: func(ctx context.Context) error { return pool.Ping(ctx) }}}
	if !cfg.Memory() {
		ready = append(ready, httpapi.ReadinessCheck{Name: "redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	}
	return httpapi.New(httpapi.Config{MaxBodyBytes: cfg.MaxBodyBytes, AuthRatePerMinute: cfg.AuthRatePerMinute,
		PublicBaseURL: cfg.PublicBaseURL, WorkspaceRateLimit: cfg.WorkspaceRateLimit, StoreRateLimits: cfg.StoreRateLimits}, httpapi.Deps{
		App:              application,
		Tokens:           tokens,
		Idempotency:      guard,
		Ready:            ready,
		HashSlots:        auth.NewHashSlots(cfg.PasswordHashConcurrency, cfg.PasswordHashWait),
		LoginLimits:      postgres.LoginLimits{Pool: pool},
		WorkspaceBuckets: workspaceBuckets(cfg, rdb),
		Registry:         reg,
		Logger:           log,
		Extra:            extra,
	})
}

// workspaceBuckets keep the workspaces' budgets (WORKSPACE_RATE_LIMIT): in Redis, shared by
// every API process; in this process's memory with the memory transport (one process serves
// everything). Nil when there is no budget.
func workspaceBuckets(cfg config.Config, rdb redis.UniversalClient) port.RateBuckets {
	switch {
	case cfg.WorkspaceRateLimit.IsZero():
		return nil
	case cfg.Memory() || rdb == nil:
		return &ratelimit.Local{}
	}
	return ratelimit.Redis{Client: rdb, Prefix: cfg.StreamPrefix + ":rate:"}
}

// ProvideCommandConsumer builds the consumer of the commands that other services send as
// messages on <STREAM_PREFIX>:commands (replies on <STREAM_PREFIX>:command-replies). It runs
// them through the API's own endpoints (server), so it belongs with the API; it reads from
// the queues' Redis client.
func ProvideCommandConsumer(cfg config.Config, server *httpapi.Server, application *app.Application, cipher *secret.Cipher,
	rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*commandstream.Consumer, error) {
	return commandstream.New(commandstream.Config{
		Client:        rdb,
		Stream:        cfg.StreamPrefix + ":commands",
		Replies:       cfg.StreamPrefix + ":command-replies",
		Concurrency:   cfg.CommandsConcurrency,
		ClaimIdle:     cfg.CommandsClaimIdle,
		MaxDeliveries: int64(cfg.CommandsMaxDeliveries),
		MaxAge:        cfg.CommandsMaxAge,
		RepliesMaxLen: cfg.CommandRepliesMaxLen,
		Executor:      server,
		Principals:    application.Queries,
		Cipher:        cipher,
		Registry:      reg,
		Logger:        log,
	})
}

// API is the assembled HTTP service.
type API struct {
	Server *httpapi.Server
	// Commands consumes the command stream; `commands` and `all` run it, `serve` does not.
	Commands *commandstream.Consumer
	App      *app.Application
	Pool     *pgxpool.Pool
	// Redis is the queues' client: a *redis.ClusterClient with REDIS_CLUSTER_ADDRS.
	Redis redis.UniversalClient
}

// ProvideBullMQConfig is the queue configuration shared by publishers and workers.
func ProvideBullMQConfig(cfg config.Config, rdb redis.UniversalClient) bullmq.Config {
	return bullmq.Config{Client: rdb, Prefix: cfg.BullMQPrefix, QueueHashTags: cfg.BullMQQueueHashTags, Attempts: cfg.JobAttempts,
		Backoff:          bullmq.Backoff{Type: bullmq.BackoffExponential, Delay: config.JobBackoff.Milliseconds()},
		RemoveOnComplete: cfg.KeepCompleted(), RemoveOnFailAge: cfg.JobFailedRetention, DedupWindow: cfg.JobRetention}
}

// ProvidePublishers builds the dispatcher's publishers: BullMQ for every job queue and, for
// integration events, eventstream.Publisher (watermill-redisstream's entry contract with
// eventstream.Marshaller, one pipeline per batch) on the stream <STREAM_PREFIX>:events
// (CloudEvents, trimmed to EVENTS_MAX_LEN on each append). The stream publisher gets its own
// Redis client, of the same kind as ProvideRedis's (a cluster client with
// REDIS_CLUSTER_ADDRS; the stream is one key, so any slot will do), closed by the cleanup.
func ProvidePublishers(cfg config.Config, bcfg bullmq.Config, q *Queues, log *slog.Logger) (outbox.PublisherMap, func(), error) {
	if q.Memory != nil {
		m := outbox.PublisherMap{worker.StreamEvents: q.Memory}
		for _, d := range flows.Queues() {
			m[d] = q.Memory
		}
		return m, func() {}, nil
	}
	wlog := watermill.NewSlogLogger(log)
	bp, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bcfg}, wlog)
	if err != nil {
		return nil, nil, err
	}
	streamClient, err := newRedisClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	sp, err := eventstream.NewPublisher(eventstream.PublisherConfig{Client: streamClient, MaxLen: cfg.EventsMaxLen})
	if err != nil {
		_ = streamClient.Close()
		return nil, nil, err
	}
	m := outbox.PublisherMap{worker.StreamEvents: prefixedTopics{prefix: cfg.StreamPrefix + ":", Publisher: sp}}
	for _, q := range flows.Queues() {
		m[q] = bp
	}
	return m, func() { _ = bp.Close(); _ = streamClient.Close() }, nil
}

// prefixedTopics publishes to prefix+topic: the integration streams live under
// STREAM_PREFIX (e.g. "listing:events").
type prefixedTopics struct {
	prefix string
	message.Publisher
}

// Publish implements message.Publisher.
func (p prefixedTopics) Publish(topic string, msgs ...*message.Message) error {
	return p.Publisher.Publish(p.prefix+topic, msgs...)
}

// fairLaneField is the request payloads' field naming the store a task calls: fair share's
// slots are kept per store within a workspace's queue, so that a store waiting for its rate
// limit (STORE_RATE_LIMITS) in the slots it holds never holds back another store's requests.
const fairLaneField = "store_id"

// fairQueues are the flows' request queues, fair-shared across workspaces
// (FAIR_SHARE_SLOTS).
func fairQueues() []outbox.FairQueue {
	var out []outbox.FairQueue
	for _, s := range flows.All() {
		out = append(out, outbox.FairQueue{Flow: s.Name, Queue: s.Queue, TaskIDField: s.TaskIDField, Table: s.Table})
	}
	return out
}

// ProvideDispatcher builds the outbox dispatcher. With the bullmq transport it subscribes to
// the wake-ups of the other processes (ProvideEventPublisher).
func ProvideDispatcher(cfg config.Config, pool *pgxpool.Pool, pubs outbox.PublisherMap, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*outbox.Dispatcher, error) {
	slots, err := cfg.FairSlots()
	if err != nil {
		return nil, err
	}
	// A lane alone in its queue may take 4 × the default slots; FAIR_SHARE_SLOTS set to a
	// number is the bound, alone or not.
	alone := 0
	if cfg.FairShareSlots == "" {
		alone = outbox.DefaultAloneFactor
	}
	dcfg := outbox.DispatcherConfig{MaxAttempts: cfg.OutboxMaxAttempts, Lease: cfg.OutboxLease, DisableListen: true,
		FairShare: outbox.FairShare{Slots: slots, AloneFactor: alone, Queues: fairQueues(), LaneField: fairLaneField}}
	if !cfg.Memory() {
		dcfg.WakeRedis, dcfg.WakeChannel = rdb, wakeChannel(cfg)
	}
	return outbox.NewDispatcher(dcfg, pool, pubs, log, reg)
}

// ProvideEventStreams builds the age trimmer of the integration event stream
// (EVENTS_RETENTION) and registers the metrics of the integration streams
// (eventstream.StreamCollector: length, lag and pending entries per consumer group,
// retention bounds) on reg: <STREAM_PREFIX>:events, :commands (trimmed by its senders, if
// at all: no bound of ours) and :command-replies (COMMAND_REPLIES_MAX_LEN). With the memory
// transport there are no streams: nil.
func ProvideEventStreams(cfg config.Config, rdb redis.UniversalClient, reg *prometheus.Registry, log *slog.Logger) (*eventstream.Trimmer, error) {
	if cfg.Memory() {
		return nil, nil
	}
	stream := eventstream.Stream(cfg.StreamPrefix)
	var err error
	metrics.Register(reg, eventstream.NewStreamCollector(rdb, map[string]eventstream.Retention{
		stream:                                {MaxLen: cfg.EventsMaxLen, MaxAge: cfg.EventsRetention},
		cfg.StreamPrefix + ":commands":        {},
		cfg.StreamPrefix + ":command-replies": {MaxLen: cfg.CommandRepliesMaxLen},
	}, log), &err)
	if err != nil {
		return nil, err
	}
	return eventstream.NewTrimmer(eventstream.TrimmerConfig{Client: rdb, Streams: []string{stream}, MaxAge: cfg.EventsRetention, Logger: log})
}

// Cleanup runs the retention jobs.
type Cleanup struct {
	Idempotency *idem.Cleaner
	Outbox      *outbox.Cleaner
	Pool        *pgxpool.Pool
}

// ProvideCleanup builds the retention jobs; the idempotency cleaner counts what it deletes
// on reg (listing_idempotency_cleanup_deleted_total).
func ProvideCleanup(cfg config.Config, pool *pgxpool.Pool, reg *prometheus.Registry, log *slog.Logger) (*Cleanup, error) {
	m, err := idem.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	ic, err := idem.NewCleaner(pool, idem.CleanerConfig{Metrics: m})
	if err != nil {
		return nil, err
	}
	oc, err := outbox.NewCleaner(outbox.CleanupConfig{Retention: cfg.OutboxRetention}, pool, log)
	if err != nil {
		return nil, err
	}
	return &Cleanup{Idempotency: ic, Outbox: oc, Pool: pool}, nil
}

// RunOnce runs every retention job once and logs what it deleted.
func (c *Cleanup) RunOnce(ctx context.Context, log *slog.Logger) error {
	is, err := c.Idempotency.RunOnce(ctx)
	if err != nil {
		return fmt.Errorf("idempotency cleanup: %w", err)
	}
	or, err := c.Outbox.Cleanup(ctx)
	if err != nil {
		return fmt.Errorf("outbox cleanup: %w", err)
	}
	log.Info("cleanup done", "idempotency_deleted", is.Deleted, "idempotency_workspaces", is.Workspaces,
		"outbox_partitions_dropped", or.Dropped, "outbox_default_deleted", or.Deleted)
	return nil
}

// Queues are the in-process queues of QUEUE_TRANSPORT=memory, which the dispatcher and the
// workers of one process share (Memory is nil with bullmq). Build one per process with
// NewQueues and pass it to InitializeDispatch and InitializeWork.
type Queues struct {
	Memory *jobs.MemoryQueues
}

// NewQueues returns the process's Queues for cfg.
func NewQueues(cfg config.Config) *Queues {
	if cfg.Memory() {
		return &Queues{Memory: jobs.NewMemoryQueues(flows.Queues())}
	}
	return &Queues{}
}

// Dispatch is the assembled outbox dispatcher and the reconciler of stuck tasks.
type Dispatch struct {
	Dispatcher *outbox.Dispatcher
	Reconciler *reconcile.Reconciler
	// Trimmer trims the integration event stream by age; nil with the memory transport.
	Trimmer *eventstream.Trimmer
	// Pool and Redis are the process's connections, for its readiness checks.
	Pool  *pgxpool.Pool
	Redis redis.UniversalClient
}

// Run dispatches and reconciles until ctx ends.
func (d *Dispatch) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return d.Dispatcher.Run(ctx) })
	g.Go(func() error { return d.Reconciler.Run(ctx) })
	if d.Trimmer != nil {
		g.Go(func() error { return d.Trimmer.Run(ctx) })
	}
	return g.Wait()
}
