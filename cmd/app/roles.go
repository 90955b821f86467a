package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"

	"encoding/json"
	"github.com/jackc/pgx/v5/pgxpool"
	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/redis/go-redis/v9"
)

func runMigrate(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	create := fs.Bool("create-database", !cfg.Production(), "create the database when it does not exist")
	if err := fs.Parse(args); err != nil {
		return err
	}
	applied, err := postgres.Migrate(ctx, cfg.MigrateDatabaseURL, *create)
	if err != nil {
		return err
	}
	for _, m := range applied {
		log.Info("migration applied", "version", m.Version, "source", m.Source)
	}
	if len(applied) == 0 {
		log.Info("database is up to date")
	}
	return nil
}

func runServe(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", cfg.HTTPAddr, "listen address (HTTP_ADDR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.HTTPAddr = *addr
	if err := cfg.Validate(); err != nil { // -addr may move the API off loopback
		return err
	}
	reg := listing.NewRegistry()
	api, cleanup, err := listing.InitializeAPI(ctx, cfg, listing.Options{}, reg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return serveHTTP(ctx, cfg.HTTPAddr, api.Server, log)
}

// runAll migrates, then runs every role in one process until a signal arrives, the operator
// console on CONSOLE_ADDR included.
func runAll(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("all", flag.ContinueOnError)
	addr := fs.String("addr", cfg.HTTPAddr, "listen address (HTTP_ADDR)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.HTTPAddr = *addr
	if err := cfg.Validate(); err != nil { // -addr may move the API off loopback
		return err
	}
	if err := cfg.ValidateConsole(); err != nil { // before migrating: nothing starts without it
		return err
	}
	if err := runMigrate(ctx, cfg, log, nil); err != nil {
		return err
	}
	reg := listing.NewRegistry()
	api, cleanupAPI, err := listing.InitializeAPI(ctx, cfg, listing.Options{}, reg, log)
	if err != nil {
		return err
	}
	defer cleanupAPI()
	queues := listing.NewQueues(cfg)
	d, cleanupDispatch, err := listing.InitializeDispatch(ctx, cfg, queues, reg, log)
	if err != nil {
		return err
	}
	defer cleanupDispatch()
	retention, cleanupRetention, err := listing.InitializeCleanup(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer cleanupRetention()
	work, cleanupWork, err := listing.InitializeWork(ctx, cfg, queues, reg, log)
	if err != nil {
		return err
	}
	defer cleanupWork()
	consoleSrv, cleanupConsole, err := newConsole(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer cleanupConsole()

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveHTTP(ctx, cfg.ConsoleAddr, consoleSrv, log) })
	g.Go(func() error { return serveHTTP(ctx, cfg.HTTPAddr, api.Server, log) })
	g.Go(func() error { return d.Run(ctx) })
	g.Go(func() error { return work.Run(ctx) })
	if !cfg.Memory() { // the command stream lives in Redis
		g.Go(func() error { return api.Commands.Run(ctx) })
	}
	g.Go(func() error { return cleanupLoop(ctx, retention, cfg.CleanupInterval, log) })
	return g.Wait()
}

// check is one readiness check of a process.
type check struct {
	name string
	fn   func(context.Context) error
}

// readiness is what a process that holds pool (and, unless the queues are in process, rdb)
// checks on /readyz.
func readiness(cfg config.Config, pool *pgxpool.Pool, rdb redis.UniversalClient) []check {
	checks := []check{{"postgres", pool.Ping}}
	if rdb != nil && !cfg.Memory() {
		checks = append(checks, check{"redis", func(ctx context.Context) error { return rdb.Ping(ctx).Err() }})
	}
	return checks
}

// runWithAdmin runs fn until ctx ends and, when addr is set, serves the process's admin
// endpoints there: /healthz (the process runs), /readyz (its checks pass, 503 otherwise,
// naming the failed ones) and /metrics (reg).
func runWithAdmin(ctx context.Context, addr string, reg *prometheus.Registry, checks []check, log *slog.Logger,
	fn func(context.Context) error) error {
	if addr == "" {
		return fn(ctx)
	}
	g, ctx := errgroup.WithContext(ctx)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeStatus(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		cctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		status, results := http.StatusOK, map[string]string{}
		for _, c := range checks {
			results[c.name] = "ok"
			if err := c.fn(cctx); err != nil {
				log.WarnContext(cctx, "readiness check failed", "check", c.name, "err", err)
				status, results[c.name] = http.StatusServiceUnavailable, "unavailable"
			}
		}
		state := "ok"
		if status != http.StatusOK {
			state = "unavailable"
		}
		writeStatus(w, status, map[string]any{"status": state, "checks": results})
	})
	g.Go(func() error { return serveHTTP(ctx, addr, mux, log) })
	g.Go(func() error { return fn(ctx) })
	return g.Wait()
}

func writeStatus(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// serveHTTP serves h on addr until ctx ends, then drains in-flight requests for up to 20s.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	log.Info("http listening", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
