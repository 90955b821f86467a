package main

import (
	"context"
	"log/slog"

	"golang.org/x/sync/errgroup"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/app/worker/flows"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/ratelimit"
)

// runConsole serves the operator console on CONSOLE_ADDR (or -addr), and writes its
// overview's samples, until ctx ends.
func runConsole(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := newFlags("console", subcommands()["console"].summary)
	addr := fs.String("addr", cfg.ConsoleAddr, "listen address (CONSOLE_ADDR)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg.ConsoleAddr = *addr
	srv, cleanup, err := newConsole(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	ln, err := listen(cfg.ConsoleAddr)
	if err != nil {
		return err
	}
	var s startup
	s.role("console")
	s.addr("console", ln)
	s.log(log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(ctx, ln, srv, log) })
	g.Go(func() error { return srv.RunSampler(ctx) })
	return g.Wait()
}

// newConsole builds the console from cfg: the listing_operator pool (OPERATOR_DATABASE_URL),
// the queues' Redis unless QUEUE_TRANSPORT=memory, and the operators of CONSOLE_TOKENS. It
// refuses what config.ValidateConsole refuses. The cleanup closes the connections.
func newConsole(ctx context.Context, cfg config.Config, log *slog.Logger) (*console.Server, func(), error) {
	if err := cfg.ValidateConsole(); err != nil {
		return nil, nil, err
	}
	operators, err := cfg.ConsoleOperators()
	if err != nil {
		return nil, nil, err
	}
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.OperatorDatabaseURL, MaxConns: 4})
	if err != nil {
		return nil, nil, err
	}
	cleanup := pool.Close
	ccfg := console.Config{Operators: operators, Production: cfg.Production(), Pool: pool, Queues: flows.Queues(), Logger: log,
		Platforms: cfg.Platforms, StoreRateLimits: cfg.StoreRateLimits, SessionTTL: cfg.ConsoleSessionTTL, SigninFailures: cfg.ConsoleSigninFailures}
	for _, f := range flows.All() {
		ccfg.Flows = append(ccfg.Flows, console.Flow{Name: f.Name, Queue: f.Queue, Table: f.Table, Operation: f.Operation,
			RequestEvent: f.Request.EventType()})
	}
	if !cfg.Memory() {
		rdb, closeRedis, err := listing.ProvideRedis(ctx, cfg)
		if err != nil {
			pool.Close()
			return nil, nil, err
		}
		cleanup = func() { closeRedis(); pool.Close() }
		ccfg.BullMQ = bullmq.Config{Client: rdb, Prefix: cfg.BullMQPrefix}
		ccfg.RateWaits = ratelimit.WaitLog{Client: rdb, Prefix: listing.RatePrefix(cfg)}
	}
	srv, err := console.New(ccfg)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	if len(operators) == 0 {
		log.Warn("console: CONSOLE_TOKENS unset: serving loopback clients only, as operator dev (development)")
	}
	log.Info("console: operators", "count", len(operators))
	return srv, cleanup, nil
}
