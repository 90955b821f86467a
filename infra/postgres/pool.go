package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig configures Connect.
type PoolConfig struct {
	// URL is the connection string of the service role (app_user). Required.
	URL string
	// MaxConns bounds the pool. Default 20.
	MaxConns int32
	// ConnectTimeout bounds each dial. Default 5s.
	ConnectTimeout time.Duration
	// Statements, when set, counts the statements and round trips the pool sends.
	Statements *Statements
	// Tracer, when set, is told of every query and batch of the pool's connections (pgx's
	// QueryTracer; a BatchTracer too when it implements one), e.g. to count statements.
	// It takes the place of Statements' tracer.
	Tracer pgx.QueryTracer
	// TransactionPooling says URL reaches a pooler in transaction mode (PgBouncer's
	// pool_mode = transaction), where a client's consecutive transactions may run on
	// different server sessions: no statement is prepared by name (pgx's
	// QueryExecModeCacheDescribe: a statement is described once per connection, then sent
	// unnamed with its arguments in one round trip). Every setting the service makes is
	// transaction-local (set_config(…, true), SET LOCAL), every advisory lock through such a
	// pool transaction-level; what needs a session uses a pool of its own, on a direct URL.
	TransactionPooling bool
}

// Connect opens a pool (its connections know RegisterTypes) and checks that the server
// answers. The caller closes the pool.
func Connect(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres.Connect: parse url: %w", redactURLError(err))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	} else {
		pc.MaxConns = 20
	}
	if cfg.ConnectTimeout > 0 {
		pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
	} else {
		pc.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if cfg.TransactionPooling {
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	if cfg.Statements != nil {
		pc.ConnConfig.Tracer = cfg.Statements
	}
	if cfg.Tracer != nil {
		pc.ConnConfig.Tracer = cfg.Tracer
	}
	pc.AfterConnect = func(_ context.Context, c *pgx.Conn) error {
		RegisterTypes(c.TypeMap())
		return nil
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("postgres.Connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres.Connect: ping: %w", err)
	}
	return pool, nil
}

// redactURLError drops the detail of a URL parse error, which may quote the password.
func redactURLError(err error) error {
	return fmt.Errorf("invalid connection string (details withheld: they may contain a password)")
}

// WithDatabase returns the connection URL base naming another database and, when user is set,
// another user without a password (for servers that trust local connections, as development
// and tests do). Its error never quotes base, which may hold a password.
func WithDatabase(base, database, user string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", errors.New("postgres: the connection URL does not parse (details withheld: it may hold a password)")
	}
	u.Path = "/" + database
	if user != "" {
		u.User = url.User(user)
	}
	return u.String(), nil
}
