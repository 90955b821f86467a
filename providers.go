// Package listing assembles the service: the providers below build each collaborator from
// config.Config, and the google/wire injectors in wire.go (generated into wire_gen.go)
// connect them. cmd/app calls the injectors; tests call them too, so that tests run the
// service exactly as it is assembled in production.
package listing

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app"
	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/app/commands"
	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/query"
	"github.com/listingkit/listing/infra/auth"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/httpapi"
	"github.com/listingkit/listing/infra/idem"
	"github.com/listingkit/listing/infra/postgres"
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

// ProvidePool opens the app_user pool.
func ProvidePool(ctx context.Context, cfg config.Config) (*pgxpool.Pool, func(), error) {
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.DatabaseURL, MaxConns: cfg.DatabaseMaxConns})
	if err != nil {
		return nil, nil, err
	}
	return pool, pool.Close, nil
}

// ProvideRedis opens the Redis client of the queues.
func ProvideRedis(ctx context.Context, cfg config.Config) (*redis.Client, func(), error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, nil, fmt.Errorf("REDIS_URL: invalid (details withheld: they may contain a password)")
	}
	client := redis.NewClient(opts)
	return client, func() { _ = client.Close() }, nil
}

// ProvideTokens builds the access-token issuer.
func ProvideTokens(cfg config.Config, log *slog.Logger) (*auth.Tokens, error) {
	spec, dev := config.Keys(cfg.AuthTokenKeys, "auth-token")
	if dev {
		log.Warn("AUTH_TOKEN_KEYS is unset: using the public development signing key")
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

// ProvideIdempotency builds the idempotency guard (seed §2).
func ProvideIdempotency(cfg config.Config, reg *prometheus.Registry, log *slog.Logger) (*idem.Guard, error) {
	spec, dev := config.Keys(cfg.FingerprintKeys, "idempotency-fingerprint")
	if dev {
		log.Warn("FINGERPRINT_KEYS is unset: using the public development fingerprint key")
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

// ProvideBus builds the command bus: logging/metrics → RLS transaction → idempotency.
func ProvideBus(pool *pgxpool.Pool, guard *idem.Guard, reg *prometheus.Registry, log *slog.Logger) (*bus.Bus, error) {
	m, err := bus.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	return bus.New(bus.Observe(log, m), postgres.TxMiddleware(pool), guard.Middleware()), nil
}

// ProvideApplication builds the catalogue of commands and queries.
func ProvideApplication(b *bus.Bus, pool *pgxpool.Pool, hasher auth.Hasher, tokens *auth.Tokens) (*app.Application, error) {
	accounts := postgres.Accounts{}
	products := postgres.Products{}
	now := port.Clock(time.Now)
	dummy, err := hasher.Hash("dummy password for timing")
	if err != nil {
		return nil, err
	}
	return &app.Application{
		Bus: b,
		Commands: app.Commands{
			RegisterUser:     commands.RegisterUserHandler{Accounts: accounts, Refresh: accounts, Hasher: hasher, Tokens: tokens, Now: now},
			Login:            commands.LoginHandler{Accounts: accounts, Refresh: accounts, Hasher: hasher, Tokens: tokens, Now: now, DummyHash: dummy},
			RefreshSession:   commands.RefreshSessionHandler{Refresh: accounts, Tokens: tokens, Now: now},
			CreateProduct:    commands.CreateProductHandler{Products: products, Now: now},
			SaveProductDraft: commands.SaveProductDraftHandler{Products: products, Now: now},
		},
		Queries: query.Queries{Tx: postgres.Transactor{Pool: pool}, Accounts: accounts, Products: products},
	}, nil
}

// ProvideHTTP builds the HTTP API.
func ProvideHTTP(cfg config.Config, application *app.Application, tokens *auth.Tokens, guard *idem.Guard,
	pool *pgxpool.Pool, rdb *redis.Client, reg *prometheus.Registry, log *slog.Logger) (*httpapi.Server, error) {
	return httpapi.New(httpapi.Config{MaxBodyBytes: cfg.MaxBodyBytes, AuthRatePerMinute: cfg.AuthRatePerMinute}, httpapi.Deps{
		App:         application,
		Tokens:      tokens,
		Idempotency: guard,
		Ready: []httpapi.ReadinessCheck{
			{Name: "postgres", Check: func(ctx context.Context) error { return pool.Ping(ctx) }},
			{Name: "redis", Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		},
		Registry: reg,
		Logger:   log,
	})
}

// API is the assembled HTTP service.
type API struct {
	Server *httpapi.Server
	App    *app.Application
	Pool   *pgxpool.Pool
	Redis  *redis.Client
}
