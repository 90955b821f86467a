package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres"
)

func runMigrate(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := newFlags("migrate", subcommands()["migrate"].summary)
	create := fs.Bool("create-database", !cfg.Production(), "create the database when it does not exist")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return migrate(ctx, cfg, log, *create)
}

func migrate(ctx context.Context, cfg config.Config, log *slog.Logger, create bool) error {
	applied, history, err := postgres.MigrateReporting(ctx, cfg.MigrateDatabaseURL, create)
	if history.Staged > 0 || history.Moved > 0 {
		log.Info("outbox history moved to the log in batches", "staged", history.Staged, "moved", history.Moved,
			"longest_batch", history.LongestBatch.String())
	}
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
	fs := newFlags("serve", subcommands()["serve"].summary)
	addr := fs.String("addr", cfg.HTTPAddr, "listen address (HTTP_ADDR)")
	if err := parseFlags(fs, args); err != nil {
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
	ln, err := listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	var s startup
	s.role("api")
	s.api(ln)
	s.log(log)
	return serveOn(ctx, ln, api.Server, log)
}

// runAll migrates, then runs every role in one process until a signal arrives, the operator
// console on CONSOLE_ADDR included.
func runAll(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := newFlags("all", subcommands()["all"].summary)
	addr := fs.String("addr", cfg.HTTPAddr, "listen address (HTTP_ADDR)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg.HTTPAddr = *addr
	if err := cfg.Validate(); err != nil { // -addr may move the API off loopback
		return err
	}
	if err := cfg.ValidateConsole(); err != nil { // before migrating: nothing starts without it
		return err
	}
	if err := migrate(ctx, cfg, log, !cfg.Production()); err != nil {
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
	apiLn, err := listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	consoleLn, err := listen(cfg.ConsoleAddr)
	if err != nil {
		_ = apiLn.Close()
		return err
	}

	var s startup
	s.role("migrate", "api", "dispatch", "reconcile", "work", "cleanup", "console")
	if !cfg.Memory() { // the command stream lives in Redis
		s.role("commands")
	}
	s.api(apiLn)
	s.addr("console", consoleLn)
	s.sandboxes(work)
	s.add("queue_transport", cfg.QueueTransport)
	s.log(log)
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return serveOn(ctx, consoleLn, consoleSrv, log) })
	g.Go(func() error { return consoleSrv.RunSampler(ctx) })
	g.Go(func() error { return serveOn(ctx, apiLn, api.Server, log) })
	g.Go(func() error { return d.Run(ctx) })
	g.Go(func() error { return work.Run(ctx) })
	if !cfg.Memory() { // the command stream lives in Redis
		g.Go(func() error { return api.Commands.Run(ctx) })
	}
	g.Go(func() error { return cleanupLoop(ctx, retention, cfg.CleanupInterval, log) })
	return g.Wait()
}

// startup collects what a process started and where it listens, for its one start-up line.
type startup struct {
	roles []string
	attrs []any
}

func (s *startup) role(names ...string) { s.roles = append(s.roles, names...) }

func (s *startup) add(key string, value any) { s.attrs = append(s.attrs, key, value) }

// addr records the URL of an HTTP listener under key.
func (s *startup) addr(key string, ln net.Listener) { s.add(key, "http://"+ln.Addr().String()) }

// api records the API's listener and the documents and metrics it serves.
func (s *startup) api(ln net.Listener) {
	base := "http://" + ln.Addr().String()
	s.add("api", base)
	s.add("openapi", base+"/openapi.yaml")
	s.add("docs", base+"/docs")
	s.add("metrics", base+"/metrics")
}

// admin records an admin listener (nil: none).
func (s *startup) admin(ln net.Listener) {
	if ln == nil {
		return
	}
	base := "http://" + ln.Addr().String()
	s.add("admin", base)
	s.add("metrics", base+"/metrics")
}

// sandboxes records the development sandboxes w started, if any.
func (s *startup) sandboxes(w *listing.Work) {
	if w.Externals.MarketplaceSandbox != nil {
		s.add("marketplace_sandbox", w.Externals.MarketplaceURL)
	}
	if w.Externals.AISandbox != nil {
		s.add("ai_sandbox", w.Externals.AIURL)
	}
}

func (s *startup) log(log *slog.Logger) {
	log.Info("started", append([]any{"roles", s.roles}, s.attrs...)...)
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

// adminListener binds addr for runWithAdmin; nil when addr is empty (no admin endpoints).
func adminListener(addr string) (net.Listener, error) {
	if addr == "" {
		return nil, nil
	}
	return listen(addr)
}

// runWithAdmin runs fn until ctx ends and, when ln is not nil, serves the process's admin
// endpoints on it: /healthz (the process runs), /readyz (its checks pass, 503 otherwise,
// naming the failed ones) and /metrics (reg).
func runWithAdmin(ctx context.Context, ln net.Listener, reg *prometheus.Registry, checks []check, log *slog.Logger,
	fn func(context.Context) error) error {
	if ln == nil {
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
	g.Go(func() error { return serveOn(ctx, ln, mux, log) })
	g.Go(func() error { return fn(ctx) })
	return g.Wait()
}

func writeStatus(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// listen binds addr ("host:0" picks a free port) before anything is served, so that the
// start-up line names the real address.
func listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return ln, nil
}

// serveOn serves h on ln until ctx ends, then drains in-flight requests for up to 20s. It
// closes ln.
func serveOn(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       60 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
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
