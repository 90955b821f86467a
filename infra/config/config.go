// Package config reads the service configuration from environment variables. Every setting
// has a development default that works on a machine where PostgreSQL listens on
// 127.0.0.1:5432 (trust auth) and Redis on 127.0.0.1:6379. The development keys are public:
// production (APP_ENV=production) refuses them, and so does development when HTTP_ADDR is not
// a loopback address. The README's configuration table mirrors the
// struct tags below.
package config

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/caarlos0/env/v11"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
)

// commandsMaxAhead is how far ahead of the clock a command's time may be
// (commandstream.MaxAhead).
const commandsMaxAhead = 5 * time.Minute

// Config is the whole service configuration.
type Config struct {
	// Env is "development" (default) or "production".
	Env string `env:"APP_ENV" envDefault:"development"`
	// DatabaseURL connects as the service's non-owner role (app_user). RLS applies to it.
	DatabaseURL string `env:"DATABASE_URL" envDefault:"postgres://app_user@127.0.0.1:5432/listing?sslmode=disable"`
	// OperatorDatabaseURL connects as the operators' role (listing_operator: LOGIN,
	// NOSUPERUSER, NOBYPASSRLS); `app outbox` uses it. Only this role may run the functions
	// that read across workspaces for operators. Unset: DATABASE_URL as listing_operator.
	OperatorDatabaseURL string `env:"OPERATOR_DATABASE_URL"`
	// MigrateDatabaseURL connects as the owner role; only `app migrate` uses it. In development
	// it is the local superuser, which may also create the database and the roles. Unset:
	// DATABASE_URL as root.
	MigrateDatabaseURL string `env:"MIGRATE_DATABASE_URL"`
	// DatabasePoolMode says what DATABASE_URL reaches: "session" (PostgreSQL itself, or a
	// pooler in session mode: statements are prepared by name and cached per connection) or
	// "transaction" (a pooler in transaction mode, such as PgBouncer's pool_mode =
	// transaction, where consecutive transactions of a client may run on different server
	// sessions: no statement is prepared by name, each is described once per connection and
	// sent unnamed, and whatever needs a session goes to DATABASE_SESSION_URL). Default session.
	DatabasePoolMode string `env:"DATABASE_POOL_MODE" envDefault:"session"`
	// DatabaseSessionURL connects as app_user straight to PostgreSQL (never through a pooler in
	// transaction mode), for what needs a session beyond one transaction: the reconciler's
	// run-once advisory lock. Required with DATABASE_POOL_MODE=transaction, where it is also
	// the default base of OPERATOR_DATABASE_URL and MIGRATE_DATABASE_URL; unused otherwise.
	DatabaseSessionURL string `env:"DATABASE_SESSION_URL"`
	// DatabaseMaxConns bounds the service's pool.
	DatabaseMaxConns int32 `env:"DATABASE_MAX_CONNS" envDefault:"20"`
	// RedisURL is the Redis holding the BullMQ queues. With RedisClusterAddrs set it only
	// supplies the credentials and TLS of the cluster's nodes (its host and db are ignored).
	RedisURL string `env:"REDIS_URL" envDefault:"redis://127.0.0.1:6379/0"`
	// RedisClusterAddrs ("host:port,…", some nodes of a Redis Cluster), when set, makes every
	// Redis client of the service a cluster client. The keys of each queue must then share a
	// hash tag: BullMQPrefix holds one, or BullMQQueueHashTags is set (Validate refuses
	// neither). Default empty: one Redis at RedisURL.
	RedisClusterAddrs []string `env:"REDIS_CLUSTER_ADDRS"`
	// AdminAddr is where `dispatch`, `work` and `cleanup -every` serve /healthz, /readyz and
	// /metrics (flag -admin-addr); empty: nowhere.
	AdminAddr string `env:"ADMIN_ADDR"`
	// HTTPAddr is where `serve` listens.
	HTTPAddr string `env:"HTTP_ADDR" envDefault:"127.0.0.1:8080"`
	// PublicBaseURL is how clients reach this service (used in upload URLs).
	PublicBaseURL string `env:"PUBLIC_BASE_URL" envDefault:"http://127.0.0.1:8080"`
	// LogLevel is debug, info, warn or error; LogFormat is json or text.
	LogLevel  string `env:"LOG_LEVEL" envDefault:"info"`
	LogFormat string `env:"LOG_FORMAT" envDefault:"json"`

	// AuthTokenKeys signs access tokens: "id:base64secret,..."; the first signs, all verify.
	AuthTokenKeys string `env:"AUTH_TOKEN_KEYS"`
	// AccessTokenTTL is the lifetime of an access token.
	AccessTokenTTL time.Duration `env:"ACCESS_TOKEN_TTL" envDefault:"15m"`
	// AuthRatePerMinute bounds the auth requests of one client address (failed logins are
	// held back per account and address by the HTTP layer's LoginLimits).
	AuthRatePerMinute int `env:"AUTH_RATE_PER_MINUTE" envDefault:"20"`
	// FingerprintKeys are the HMAC secrets of idempotency fingerprints: "id:base64secret,...".
	FingerprintKeys string `env:"FINGERPRINT_KEYS"`
	// IdempotencyRetention is how long idempotency records live (at least 24h).
	IdempotencyRetention time.Duration `env:"IDEMPOTENCY_RETENTION" envDefault:"48h"`
	// MaxBodyBytes bounds JSON request bodies.
	MaxBodyBytes int64 `env:"MAX_BODY_BYTES" envDefault:"1048576"`

	// BullMQPrefix is the key prefix of the BullMQ queues (put a {hash tag} in it for Redis Cluster).
	BullMQPrefix string `env:"BULLMQ_PREFIX" envDefault:"bull"`
	// BullMQQueueHashTags wraps each queue name in braces in Redis ("bull:{listing-publish}:…",
	// bullmq.Config.QueueHashTags): on Redis Cluster each queue hashes to its own slot and
	// the queues spread over the nodes. Node.js workers must use the wrapped names. Default
	// false.
	BullMQQueueHashTags bool `env:"BULLMQ_QUEUE_HASH_TAGS" envDefault:"false"`

	// StreamPrefix is the key prefix of the integration streams (docs/integrations.md):
	// integration events go to "<StreamPrefix>:events", commands come on
	// "<StreamPrefix>:commands" and their replies go to "<StreamPrefix>:command-replies".
	// Default "listing".
	StreamPrefix string `env:"STREAM_PREFIX" envDefault:"listing"`
	// EventsMaxLen is how many entries the events stream keeps (about; MAXLEN ~ on each
	// append); 0: no bound by length. Default 1,000,000.
	EventsMaxLen int64 `env:"EVENTS_MAX_LEN" envDefault:"1000000"`
	// EventsRetention is how long the events stream keeps an entry (about; the dispatchers
	// trim every minute); 0: no bound by age. Default 168h.
	EventsRetention time.Duration `env:"EVENTS_RETENTION" envDefault:"168h"`
	// CommandsConcurrency is how many command messages one consumer runs at once.
	CommandsConcurrency int `env:"COMMANDS_CONCURRENCY" envDefault:"8"`
	// CommandsClaimIdle is how long a command entry may stay delivered but unacknowledged
	// (its consumer crashed, or a transient failure) before a consumer takes it back and runs
	// it again (a replay when it had executed).
	CommandsClaimIdle time.Duration `env:"COMMANDS_CLAIM_IDLE" envDefault:"30s"`
	// CommandsMaxDeliveries bounds the deliveries of one command entry: the last one answers
	// whatever it gets, a transient failure included, and is acknowledged.
	CommandsMaxDeliveries int `env:"COMMANDS_MAX_DELIVERIES" envDefault:"10"`
	// CommandsMaxAge is how old a command's time may be: an older one (or one without time,
	// or more than 5 minutes ahead) is rejected COMMAND_EXPIRED unless its idempotency record
	// answers it. CommandsMaxAge + 5m must be less than IdempotencyRetention, so that a
	// signed entry cannot outlive its record. Default 24h.
	CommandsMaxAge time.Duration `env:"COMMANDS_MAX_AGE" envDefault:"24h"`
	// CommandRepliesMaxLen trims <prefix>:command-replies to about this many entries (XADD
	// MAXLEN ~); 0: never trimmed.
	CommandRepliesMaxLen int64 `env:"COMMAND_REPLIES_MAX_LEN" envDefault:"100000"`

	// CleanupInterval is how often `cleanup --every` and `all` run the retention jobs.
	CleanupInterval time.Duration `env:"CLEANUP_INTERVAL" envDefault:"10m"`
	// OutboxRetention is how long dispatched outbox events are kept for troubleshooting.
	OutboxRetention time.Duration `env:"OUTBOX_RETENTION" envDefault:"168h"`
	// OutboxMaxAttempts is how many delivery attempts an event gets before dead_letter.
	OutboxMaxAttempts int `env:"OUTBOX_MAX_ATTEMPTS" envDefault:"20"`
	// OutboxLease bounds how long a dispatcher holds claimed events before others may retry.
	OutboxLease time.Duration `env:"OUTBOX_LEASE" envDefault:"30s"`
	// QueueTransport carries the jobs: "bullmq" (Redis) or "memory" (an in-process GoChannel;
	// `all` then needs no Redis; retries go back through the outbox).
	QueueTransport string `env:"QUEUE_TRANSPORT" envDefault:"bullmq"`
	// JobRetention is how long a job's id keeps deduplicating re-publications by the outbox
	// after the job was added, whether or not the job is still in Redis (a completed job
	// leaves at once unless it is among the JOB_KEEP_COMPLETED newest): the id stays in a
	// time-bucketed set of the queue (bullmq.Config.DedupWindow), about 70 bytes an id. A
	// re-publication it misses is still safe (handlers compare-and-set the task's state), it
	// only costs a run that finds its task done. It must be at least the outbox's redelivery
	// window (outbox.RedeliveryWindow: its backoff summed over OUTBOX_MAX_ATTEMPTS plus a lease
	// per attempt, 73.5 minutes with the defaults): Validate refuses less. Default 90m.
	JobRetention time.Duration `env:"JOB_RETENTION" envDefault:"90m"`
	// JobKeepCompleted is how many completed jobs of each queue stay in Redis, the newest (for
	// dashboards such as Bull Board; BullMQ's removeOnComplete {count}); the others leave as
	// they finish. 0: none stays. Default 1000.
	JobKeepCompleted int `env:"JOB_KEEP_COMPLETED" envDefault:"1000"`
	// JobFailedRetention is how long a failed job stays in Redis for operators (the console's
	// retry). Failures are few. At least 1m; default 24h.
	JobFailedRetention time.Duration `env:"JOB_FAILED_RETENTION" envDefault:"24h"`
	// JobAttempts is how many times a BullMQ job runs before it fails for good.
	JobAttempts int `env:"JOB_ATTEMPTS" envDefault:"5"`
	// WorkerConcurrency is how many jobs of each queue one `work` process runs at once.
	WorkerConcurrency int `env:"WORKER_CONCURRENCY" envDefault:"4"`
	// FairShareSlots is how many jobs of one workspace each flow's queue admits at once,
	// across every worker process (docs/operations.md, "Fair share"): a number of at least
	// 1, or "off". Unset: FairShareFactor × WORKER_CONCURRENCY. See FairSlots.
	FairShareSlots string `env:"FAIR_SHARE_SLOTS"`
	// JobLockDuration is how long a worker's lock on a running job lasts (renewed at half of
	// it): a job whose worker died is taken back by the stalled check once its lock expired,
	// and runs again at once, or, when the dead worker's call may still land, once the call's
	// deadline passed (the call fence: LockedCalls). Default 30s (BullMQ's): with the default
	// JOB_STALLED_INTERVAL a dead worker's job runs again within 40s. With
	// QUEUE_TRANSPORT=memory it is the lease of a job's outbox event, lengthened to cover the
	// calls when shorter (MemoryLease).
	JobLockDuration time.Duration `env:"JOB_LOCK_DURATION" envDefault:"30s"`
	// WorkerStopTimeout is the stop bound of a `work` process (and of `all`'s workers): on
	// SIGTERM it stops taking jobs and lets the calls in flight finish and be recorded for up
	// to this long, renewing their jobs' locks meanwhile; only jobs it did not start go back
	// to the queue. It must be at least the longest time-out of LockedCalls plus the record
	// step's retries (StopWithinBound). Default 75s: the 60s AI and fetch time-outs, 10s of
	// record retries and a margin. Give the process at least this long before a SIGKILL.
	WorkerStopTimeout time.Duration `env:"WORKER_STOP_TIMEOUT" envDefault:"75s"`
	// JobStalledInterval is the period of the stalled check: a job whose worker died runs
	// again at most JOB_LOCK_DURATION + JOB_STALLED_INTERVAL after. Default 10s.
	JobStalledInterval time.Duration `env:"JOB_STALLED_INTERVAL" envDefault:"10s"`
	// JobMaxStalls is how often a job may stall (its worker stopped while holding it) before
	// it fails, and its task with JOB_STALLED. A stall is the worker's fault, not the job's,
	// so a stalled job runs again; the bound only stops a job that kills its worker each time.
	JobMaxStalls int `env:"JOB_MAX_STALLS" envDefault:"5"`

	// ReconcileAfter is how long a task may stay unfinished without moving before the
	// reconciler delivers it again; ReconcileAfterQueues overrides it per queue
	// ("queue=duration,..."). Each must exceed the longest a healthy task goes without
	// moving: its longest job, the backoff of its retries and any upstream Retry-After.
	ReconcileAfter       time.Duration            `env:"RECONCILE_AFTER" envDefault:"15m"`
	ReconcileAfterQueues map[string]time.Duration `env:"RECONCILE_AFTER_QUEUES" envKeyValSeparator:"="`
	// ReconcileInterval is the period of the reconciler's sweep.
	ReconcileInterval time.Duration `env:"RECONCILE_INTERVAL" envDefault:"1m"`
	// ReconcileMax is how often one task that ran is delivered again before it fails with
	// DELIVERY_EXHAUSTED. A delivery of a task whose handler has not started since the
	// previous one (its job lost before any worker took it) does not count: TaskMaxAge
	// bounds those.
	ReconcileMax int `env:"RECONCILE_MAX" envDefault:"3"`
	// TaskMaxAge is how long, from its first dispatch, a task whose handler never ran is
	// delivered again before it fails with DELIVERY_EXHAUSTED. Positive.
	TaskMaxAge time.Duration `env:"TASK_MAX_AGE" envDefault:"24h"`

	// PlatformBaseURL is the marketplace gateway. Empty in development: `all` and `work`
	// start the marketplace sandbox on SandboxMarketplaceAddr instead.
	PlatformBaseURL string `env:"PLATFORM_BASE_URL"`
	// Platforms lists the platform names stores may use.
	Platforms []string `env:"PLATFORMS" envDefault:"sandbox"`
	// AIBaseURL and AIAPIKey reach an OpenAI-compatible provider. Empty in development: the
	// AI sandbox is started on SandboxAIAddr instead.
	AIBaseURL string `env:"AI_BASE_URL"`
	AIAPIKey  string `env:"AI_API_KEY"`
	// PlatformTimeout bounds one call to the marketplace gateway; AITimeout one call to the
	// AI provider. A flow's call fence (LockedCalls) is made of them: two platform time-outs
	// for a publication, a listing update or an unpublish, two AI time-outs for an AI task.
	PlatformTimeout time.Duration `env:"PLATFORM_TIMEOUT" envDefault:"15s"`
	AITimeout       time.Duration `env:"AI_TIMEOUT" envDefault:"60s"`
	// AITextModel names the model of text and category tasks.
	AITextModel string `env:"AI_TEXT_MODEL" envDefault:"gpt-4o-mini"`
	// SandboxMarketplaceAddr and SandboxAIAddr are where development sandboxes listen.
	SandboxMarketplaceAddr string `env:"SANDBOX_MARKETPLACE_ADDR" envDefault:"127.0.0.1:8091"`
	SandboxAIAddr          string `env:"SANDBOX_AI_ADDR" envDefault:"127.0.0.1:8092"`
	// SandboxMarketplaceRate is the marketplace sandbox's limit per api key (a shop's
	// credentials), "<per second>/<burst>" (e.g. 10/20): a call beyond it is answered 429
	// with Retry-After. Empty (default): no limit.
	SandboxMarketplaceRate domain.RateLimit `env:"SANDBOX_MARKETPLACE_RATE"`

	// StoreRateLimits are the budgets of each store's requests to its marketplace, by
	// platform: "<platform>=<per second>/<burst>,…" (e.g. sandbox=10/20), shared by every
	// worker process (in Redis); a store's own (PUT .../stores/{id}/rate-limit) replaces its
	// platform's. A platform not named: no limit. Empty (default): no limits.
	StoreRateLimits RateLimits `env:"STORE_RATE_LIMITS"`
	// WorkspaceRateLimit is each workspace's budget of requests to the API and the command
	// stream together, "<per second>/<burst>", shared by every API process (in Redis); a
	// request beyond it is answered 429 RATE_LIMITED with Retry-After. Empty (default): no
	// limit.
	WorkspaceRateLimit domain.RateLimit `env:"WORKSPACE_RATE_LIMIT"`

	// StorageDir is the local object storage (used when S3Bucket is empty).
	StorageDir string `env:"STORAGE_DIR" envDefault:"./var/storage"`
	// S3 settings; S3Bucket set means S3 storage.
	S3Endpoint        string `env:"S3_ENDPOINT"`
	S3Region          string `env:"S3_REGION" envDefault:"us-east-1"`
	S3Bucket          string `env:"S3_BUCKET"`
	S3AccessKeyID     string `env:"S3_ACCESS_KEY_ID"`
	S3SecretAccessKey string `env:"S3_SECRET_ACCESS_KEY"`
	S3UsePathStyle    bool   `env:"S3_USE_PATH_STYLE" envDefault:"true"`
	// UploadSigningKey signs local upload URLs (base64, ≥ 32 bytes); every `serve` process
	// must share it.
	UploadSigningKey string `env:"UPLOAD_SIGNING_KEY"`
	// MediaMaxBytes bounds an uploaded or transferred media.
	MediaMaxBytes int64 `env:"MEDIA_MAX_BYTES" envDefault:"20971520"`
	// MediaDecodeMaxBytes bounds the memory decoding one image may take, computed from its
	// header before any pixel is decoded (infra/imaging.Header.DecodeBytes); an image
	// beyond it is rejected with MEDIA_TOO_LARGE. Default 128 MiB: a 50-megapixel 4:2:0
	// JPEG (75 MB) fits, a progressive or 16-bit image of that size does not.
	MediaDecodeMaxBytes int64 `env:"MEDIA_DECODE_MAX_BYTES" envDefault:"134217728"`
	// MediaDecodeConcurrency bounds how many images one process holds decoded at once
	// (each up to MediaDecodeMaxBytes plus about 85 MiB to derive its variants); further
	// media jobs wait. Default 1: a 2-core machine gains little from more, and decode
	// memory stays bounded whatever WorkerConcurrency says.
	MediaDecodeConcurrency int `env:"MEDIA_DECODE_CONCURRENCY" envDefault:"1"`
	// FetchAllowPrivate lifts the address guard of material transfers (tests only; refused
	// in production).
	FetchAllowPrivate bool `env:"FETCH_ALLOW_PRIVATE" envDefault:"false"`
	// FetchAllowPrefixes are URL prefixes ("http://mirror.internal:8000/media/,…") whose URLs
	// material transfers may fetch whatever address they lead to; every other URL stays under
	// the address guard. Default empty: none, except in development with the marketplace
	// sandbox (PLATFORM_BASE_URL unset), where it is the sandbox's sample files,
	// http://<SANDBOX_MARKETPLACE_ADDR>/_sandbox/files/.
	FetchAllowPrefixes []string `env:"FETCH_ALLOW_PREFIXES"`
	// FetchTimeout bounds one material download.
	FetchTimeout time.Duration `env:"FETCH_TIMEOUT" envDefault:"60s"`

	// CredentialsKeys seal store credentials: "id:base64-32-bytes,..."; the first seals.
	CredentialsKeys string `env:"CREDENTIALS_KEYS"`
	// PasswordHashConcurrency bounds the password hashes (argon2id, 64 MiB each) one
	// process computes at once, for register and login; 0 (default) means the number of
	// CPUs.
	PasswordHashConcurrency int `env:"PASSWORD_HASH_CONCURRENCY" envDefault:"0"`
	// PasswordHashWait is how long a register or login waits for a hashing slot before it
	// is answered 503 SERVICE_BUSY with Retry-After.
	PasswordHashWait time.Duration `env:"PASSWORD_HASH_WAIT" envDefault:"2s"`

	// ConsoleAddr is where `console` and `all` serve the operator console. Default
	// 127.0.0.1:8081.
	ConsoleAddr string `env:"CONSOLE_ADDR" envDefault:"127.0.0.1:8081"`
	// ConsoleTokens are the console's operators, "name:secret,..." (see ConsoleOperators).
	// Optional in development, where the console then serves loopback clients only, as the
	// operator "dev"; required in production, where the console refuses to start without it.
	ConsoleTokens string `env:"CONSOLE_TOKENS"`
	// ConsoleSessionTTL is how long a console session lasts after sign-in (sign-out ends it
	// sooner, on every console). Default 8h.
	ConsoleSessionTTL time.Duration `env:"CONSOLE_SESSION_TTL" envDefault:"8h"`
	// ConsoleSigninFailures is how many wrong secrets (sign-in form or Bearer) one client
	// address (an IPv6 client: its /64) may send the console within 15 minutes; its next
	// attempts are answered 429 with Retry-After until the oldest failure is 15 minutes
	// old. Default 10.
	ConsoleSigninFailures int `env:"CONSOLE_SIGNIN_FAILURES" envDefault:"10"`

	// MemoryLimit is the Go runtime's soft memory limit (runtime/debug.SetMemoryLimit) that
	// every subcommand sets at start: a number of bytes with an optional unit B, KiB, MiB,
	// GiB or TiB (the syntax of GOMEMLIMIT); "off" or 0 set none. A GOMEMLIMIT environment
	// variable, when set, wins. Default 1GiB: several times what one process needs at its
	// bounds (decodes, hashes, pools), a small share of the 24 GiB development machine, so
	// the collector works harder near it instead of letting garbage pile up.
	MemoryLimit ByteSize `env:"MEMORY_LIMIT" envDefault:"1GiB"`
}

// Load reads the environment.
func Load() (Config, error) {
	var c Config
	if err := env.Parse(&c); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := c.defaultDatabaseURLs(); err != nil {
		return Config{}, err
	}
	return c, c.Validate()
}

// defaultDatabaseURLs sets an unset OperatorDatabaseURL or MigrateDatabaseURL to DATABASE_URL
// (DATABASE_SESSION_URL when DATABASE_POOL_MODE is transaction and it is set) with its role
// (and no password).
func (c *Config) defaultDatabaseURLs() error {
	base, name := c.DatabaseURL, "DATABASE_URL"
	if c.TransactionPooling() && c.DatabaseSessionURL != "" {
		base, name = c.DatabaseSessionURL, "DATABASE_SESSION_URL"
	}
	for _, d := range []struct {
		url  *string
		role string
	}{{&c.OperatorDatabaseURL, OperatorRole}, {&c.MigrateDatabaseURL, MigrateRole}} {
		if *d.url != "" {
			continue
		}
		u, err := url.Parse(base)
		if err != nil {
			return fmt.Errorf("config: %s does not parse (details withheld: it may hold a password)", name)
		}
		u.User = url.User(d.role)
		*d.url = u.String()
	}
	return nil
}

// The roles of the database URLs that default to DATABASE_URL's database.
const (
	OperatorRole = "listing_operator"
	MigrateRole  = "root"
)

// FairShareFactor is FAIR_SHARE_SLOTS's default in multiples of WORKER_CONCURRENCY: one
// busy workspace keeps that many processes' workers busy, with jobs queued behind each
// running one so that no worker waits for the next admission.
const FairShareFactor = 4

// FairSlots is FAIR_SHARE_SLOTS as a number: 0 when "off", FairShareFactor ×
// WORKER_CONCURRENCY when unset.
func (c Config) FairSlots() (int, error) {
	switch c.FairShareSlots {
	case "":
		return FairShareFactor * c.WorkerConcurrency, nil
	case "off":
		return 0, nil
	}
	n, err := strconv.Atoi(c.FairShareSlots)
	if err != nil || n < 1 || n > 100000 {
		return 0, errors.New(`FAIR_SHARE_SLOTS must be a number in [1, 100000] or "off"`)
	}
	return n, nil
}

// Validate checks the configuration without changing it.
func (c Config) Validate() error {
	var errs []error
	if c.Env != "development" && c.Env != "production" {
		errs = append(errs, errors.New("APP_ENV must be development or production"))
	}
	devKeys := c.devKeys()
	if c.Production() {
		for _, name := range devKeys {
			errs = append(errs, fmt.Errorf("%s is required in production (a real key, not the development one)", name))
		}
		if c.PlatformBaseURL == "" || c.AIBaseURL == "" {
			errs = append(errs, errors.New("PLATFORM_BASE_URL and AI_BASE_URL are required in production (sandboxes are for development)"))
		}
		if c.FetchAllowPrivate {
			errs = append(errs, errors.New("FETCH_ALLOW_PRIVATE=true is refused in production"))
		}
	} else if len(devKeys) > 0 && !loopback(c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("development keys (%s unset or public) are refused when HTTP_ADDR %q is not a loopback address",
			strings.Join(devKeys, ", "), c.HTTPAddr))
	}
	switch c.DatabasePoolMode {
	case PoolModeSession:
	case PoolModeTransaction:
		if c.DatabaseSessionURL == "" {
			errs = append(errs, errors.New("DATABASE_SESSION_URL is required with DATABASE_POOL_MODE=transaction (a direct connection for what needs a session)"))
		}
	default:
		errs = append(errs, errors.New("DATABASE_POOL_MODE must be session or transaction"))
	}
	if c.IdempotencyRetention < 24*time.Hour {
		errs = append(errs, errors.New("IDEMPOTENCY_RETENTION must be at least 24h"))
	}
	if c.CommandsMaxAge <= 0 || c.CommandsMaxAge+commandsMaxAhead >= c.IdempotencyRetention {
		errs = append(errs, fmt.Errorf("COMMANDS_MAX_AGE (%s) must be positive and, plus %s, less than IDEMPOTENCY_RETENTION (%s): a signed command must not outlive its idempotency record",
			c.CommandsMaxAge, commandsMaxAhead, c.IdempotencyRetention))
	}
	if c.JobAttempts < 1 || c.WorkerConcurrency < 1 || c.OutboxMaxAttempts < 1 {
		errs = append(errs, errors.New("JOB_ATTEMPTS, WORKER_CONCURRENCY and OUTBOX_MAX_ATTEMPTS must be at least 1"))
	} else if w := outbox.RedeliveryWindow(c.OutboxMaxAttempts, c.OutboxLease); c.JobRetention < w {
		errs = append(errs, fmt.Errorf("JOB_RETENTION (%s) must be at least the outbox's redelivery window (%s: its backoff over OUTBOX_MAX_ATTEMPTS=%d plus OUTBOX_LEASE=%s per attempt): a job id must keep deduplicating re-publications for as long as the outbox may re-publish it",
			c.JobRetention, w.Round(time.Second), c.OutboxMaxAttempts, c.OutboxLease))
	}
	if _, err := c.FairSlots(); err != nil {
		errs = append(errs, err)
	}
	if c.JobFailedRetention < time.Minute || c.JobKeepCompleted < 0 {
		errs = append(errs, errors.New("JOB_FAILED_RETENTION must be at least 1m and JOB_KEEP_COMPLETED at least 0"))
	}
	if c.JobLockDuration < 10*time.Millisecond || c.JobStalledInterval < 10*time.Millisecond || c.JobMaxStalls < 0 {
		errs = append(errs, errors.New("JOB_LOCK_DURATION and JOB_STALLED_INTERVAL must be at least 10ms, JOB_MAX_STALLS at least 0"))
	}
	if c.CommandsConcurrency < 1 || c.CommandsMaxDeliveries < 1 || c.CommandsClaimIdle < 100*time.Millisecond || c.CommandRepliesMaxLen < 0 {
		errs = append(errs, errors.New("COMMANDS_CONCURRENCY and COMMANDS_MAX_DELIVERIES must be at least 1, COMMANDS_CLAIM_IDLE at least 100ms, COMMAND_REPLIES_MAX_LEN at least 0"))
	}
	if c.QueueTransport != TransportBullMQ && c.QueueTransport != TransportMemory {
		errs = append(errs, errors.New("QUEUE_TRANSPORT must be bullmq or memory"))
	}
	if c.PlatformTimeout <= 0 || c.AITimeout <= 0 || c.FetchTimeout <= 0 {
		errs = append(errs, errors.New("PLATFORM_TIMEOUT, AI_TIMEOUT and FETCH_TIMEOUT must be positive"))
	}
	if c.PlatformTimeout > 0 && c.AITimeout > 0 && c.FetchTimeout > 0 {
		if err := StopWithinBound(c.WorkerStopTimeout, c.LockedCalls()); err != nil {
			errs = append(errs, err)
		}
	}
	if c.ReconcileInterval <= 0 || c.ReconcileMax < 0 {
		errs = append(errs, errors.New("RECONCILE_INTERVAL must be positive and RECONCILE_MAX at least 0"))
	}
	if c.TaskMaxAge <= 0 {
		errs = append(errs, errors.New("TASK_MAX_AGE must be positive"))
	}
	if least := c.QuietestHealthyTask(); c.ReconcileAfter < least {
		errs = append(errs, fmt.Errorf("RECONCILE_AFTER must be at least %s (the job lock plus the backoff of JOB_ATTEMPTS)", least))
	}
	for q, d := range c.ReconcileAfterQueues {
		if least := c.QuietestHealthyTask(); d < least {
			errs = append(errs, fmt.Errorf("RECONCILE_AFTER_QUEUES %s must be at least %s (the job lock plus the backoff of JOB_ATTEMPTS)", q, least))
		}
	}
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, errors.New("MAX_BODY_BYTES must be at least 1024"))
	}
	if c.MediaDecodeMaxBytes < 1<<20 || c.MediaDecodeConcurrency < 1 {
		errs = append(errs, errors.New("MEDIA_DECODE_MAX_BYTES must be at least 1 MiB and MEDIA_DECODE_CONCURRENCY at least 1"))
	}
	if c.PasswordHashConcurrency < 0 || c.PasswordHashWait <= 0 {
		errs = append(errs, errors.New("PASSWORD_HASH_CONCURRENCY must not be negative and PASSWORD_HASH_WAIT must be positive"))
	}
	if _, _, err := net.SplitHostPort(c.ConsoleAddr); err != nil {
		errs = append(errs, fmt.Errorf("CONSOLE_ADDR must be host:port: %w", err))
	}
	if _, err := c.ConsoleOperators(); err != nil {
		errs = append(errs, err)
	}
	if c.ConsoleSessionTTL < time.Minute || c.ConsoleSigninFailures < 1 {
		errs = append(errs, errors.New("CONSOLE_SESSION_TTL must be at least 1m and CONSOLE_SIGNIN_FAILURES at least 1"))
	}
	if len(c.RedisClusterAddrs) > 0 {
		if err := (bullmq.Config{Prefix: c.BullMQPrefix, QueueHashTags: c.BullMQQueueHashTags}).ClusterSafe(); err != nil {
			errs = append(errs, fmt.Errorf("REDIS_CLUSTER_ADDRS is set but the queues' keys share no hash tag: "+
				"set BULLMQ_QUEUE_HASH_TAGS=true or put a hash tag in BULLMQ_PREFIX (such as {bull}) (%w)", err))
		}
	}
	if c.StreamPrefix == "" || c.EventsMaxLen < 0 || c.EventsRetention < 0 {
		errs = append(errs, errors.New("STREAM_PREFIX must not be empty, EVENTS_MAX_LEN and EVENTS_RETENTION must not be negative"))
	}
	if c.MemoryLimit < 0 {
		errs = append(errs, errors.New("MEMORY_LIMIT must not be negative"))
	}
	return errors.Join(errs...)
}

// ValidateConsole checks what the operator console needs to start, beyond Validate:
// CONSOLE_TOKENS in production; in development without them (the console then serves
// loopback clients only, as "dev") a loopback CONSOLE_ADDR.
func (c Config) ValidateConsole() error {
	ops, err := c.ConsoleOperators()
	if err != nil {
		return err
	}
	if len(ops) > 0 {
		return nil
	}
	if c.Production() {
		return errors.New("CONSOLE_TOKENS is required in production: the console refuses to start without operators")
	}
	if !loopback(c.ConsoleAddr) {
		return fmt.Errorf("without CONSOLE_TOKENS the console serves loopback clients only: CONSOLE_ADDR %q must be a loopback address", c.ConsoleAddr)
	}
	return nil
}

// MinConsoleSecret is the shortest secret CONSOLE_TOKENS accepts, in bytes.
const MinConsoleSecret = 16

// ConsoleOperators parses CONSOLE_TOKENS ("name:secret,..."; spaces around items are
// trimmed) into secrets by operator name; empty when unset. A name is 1-200 characters of
// letters, digits and ._@+-; a secret at least MinConsoleSecret bytes without spaces or
// commas. Names and secrets must be unique (a secret names its operator). The error never
// quotes a secret.
func (c Config) ConsoleOperators() (map[string]string, error) {
	ops := map[string]string{}
	if strings.TrimSpace(c.ConsoleTokens) == "" {
		return ops, nil
	}
	seen := map[string]bool{}
	for i, item := range strings.Split(c.ConsoleTokens, ",") {
		name, secret, ok := strings.Cut(strings.TrimSpace(item), ":")
		switch {
		case !ok || !validOperatorName(name):
			return nil, fmt.Errorf("CONSOLE_TOKENS item %d must be name:secret with a name of 1-200 letters, digits or ._@+-", i+1)
		case len(secret) < MinConsoleSecret || strings.ContainsAny(secret, " \t"):
			return nil, fmt.Errorf("CONSOLE_TOKENS: the secret of %q must be at least %d bytes, without spaces", name, MinConsoleSecret)
		case ops[name] != "":
			return nil, fmt.Errorf("CONSOLE_TOKENS names %q twice", name)
		case seen[secret]:
			return nil, fmt.Errorf("CONSOLE_TOKENS: %q has the secret of another operator", name)
		}
		ops[name], seen[secret] = secret, true
	}
	return ops, nil
}

func validOperatorName(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._@+-", r)) {
			return false
		}
	}
	return true
}

// Queue transports (QUEUE_TRANSPORT).
const (
	TransportBullMQ = "bullmq"
	TransportMemory = "memory"
)

// KeepCompleted is BullMQ's removeOnComplete for JOB_KEEP_COMPLETED: the newest n completed
// jobs of a queue stay, or none.
func (c Config) KeepCompleted() bullmq.KeepJobs {
	if c.JobKeepCompleted <= 0 {
		return bullmq.KeepJobs{Remove: true}
	}
	return bullmq.KeepJobs{Count: c.JobKeepCompleted}
}

// DATABASE_POOL_MODE values.
const (
	PoolModeSession     = "session"
	PoolModeTransaction = "transaction"
)

// TransactionPooling reports whether DATABASE_URL goes through a pooler in transaction mode.
func (c Config) TransactionPooling() bool { return c.DatabasePoolMode == PoolModeTransaction }

// Memory reports whether the jobs travel in process (QUEUE_TRANSPORT=memory).
func (c Config) Memory() bool { return c.QueueTransport == TransportMemory }

// JobBackoff is the first retry delay of a job; retry n waits JobBackoff × 2^(n-1).
const JobBackoff = time.Second

// QuietestHealthyTask is the least time a healthy task may go without moving: a worker's
// lock (a task whose worker died is taken back after it), or the longest call fence (two of
// the longest call time-out, LockedCalls: its task waits for it) when longer, plus the
// backoff of every retry of JOB_ATTEMPTS. Reconciliation thresholds must not be shorter.
func (c Config) QuietestHealthyTask() time.Duration {
	backoff := time.Duration(0)
	for n := 1; n < c.JobAttempts && n < 32; n++ {
		backoff += JobRetryDelay(n)
	}
	return max(c.JobLockDuration, 2*longestCall(c.LockedCalls()).Timeout) + backoff
}

// JobRetryDelay is the wait before a job's attempt n+1 after attempt n (from 1) failed:
// JobBackoff × 2^(n-1), as BullMQ's exponential backoff.
func JobRetryDelay(n int) time.Duration { return JobBackoff << (min(max(n, 1), 32) - 1) }

// devKeys names the key settings that would use a development key: unset, or holding the
// public development secret. UPLOAD_SIGNING_KEY counts only with local storage.
func (c Config) devKeys() []string {
	var names []string
	for _, k := range []struct{ name, spec, purpose string }{
		{"AUTH_TOKEN_KEYS", c.AuthTokenKeys, "auth-token"},
		{"FINGERPRINT_KEYS", c.FingerprintKeys, "idempotency-fingerprint"},
		{"UPLOAD_SIGNING_KEY", c.UploadSigningKey, "upload-signing"},
		{"CREDENTIALS_KEYS", c.CredentialsKeys, "credentials"},
	} {
		if k.name == "UPLOAD_SIGNING_KEY" && c.S3Bucket != "" {
			continue
		}
		if k.spec == "" || strings.Contains(k.spec, strings.TrimPrefix(DevKey(k.purpose), "dev:")) {
			names = append(names, k.name)
		}
	}
	return names
}

// loopback reports whether addr (host:port) listens on loopback only: a loopback IP or
// "localhost". An empty host listens on every interface.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// Production reports whether APP_ENV=production.
func (c Config) Production() bool { return c.Env == "production" }

// DevKey returns a development-only key spec "dev:<base64>" derived from purpose. The value
// is public (it is computed from this source); Validate refuses to run production without
// real keys, and the service logs a warning whenever a development key is in use.
func DevKey(purpose string) string {
	sum := sha256.Sum256([]byte("listing development key, never for production: " + purpose))
	return "dev:" + base64.StdEncoding.EncodeToString(sum[:])
}

// Keys returns spec, or the development key for purpose when spec is empty (and whether the
// development key was used).
func Keys(spec, purpose string) (string, bool) {
	if spec != "" {
		return spec, false
	}
	return DevKey(purpose), true
}

// ByteSize is a number of bytes written as GOMEMLIMIT writes it: digits with an optional
// unit B, KiB, MiB, GiB or TiB ("1GiB", "512MiB", "1073741824"); "off" reads as 0.
type ByteSize int64

// UnmarshalText implements encoding.TextUnmarshaler.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	if s == "off" {
		*b = 0
		return nil
	}
	units := []struct {
		suffix string
		shift  uint
	}{{"TiB", 40}, {"GiB", 30}, {"MiB", 20}, {"KiB", 10}, {"B", 0}}
	var shift uint
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, shift = n, u.shift
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return fmt.Errorf("%q is not a byte size such as 1GiB, 512MiB or 1073741824", text)
	}
	*b = ByteSize(n << shift)
	return nil
}

// RateLimits are rate limits by name, written "<name>=<per second>/<burst>,…" (see
// domain.ParseRateLimit); "" is none.
type RateLimits map[string]domain.RateLimit

// UnmarshalText implements encoding.TextUnmarshaler.
func (r *RateLimits) UnmarshalText(text []byte) error {
	m := RateLimits{}
	for _, part := range strings.Split(string(text), ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		name, limit, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return fmt.Errorf("%q: want <platform>=<per second>/<burst>,…, e.g. sandbox=10/20", part)
		}
		if _, dup := m[name]; dup {
			return fmt.Errorf("%q is named twice", name)
		}
		l, err := domain.ParseRateLimit(limit)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		m[name] = l
	}
	*r = m
	return nil
}
