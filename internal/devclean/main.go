package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Test databases and templates, as infra/postgres/pgtest names them, and the databases of
// an interrupted `make demo` (which drops its own when it ends).
var testDatabasePrefixes = []string{"listing_test_", "listing_tpl_", "listing_demo_"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("devclean", flag.ContinueOnError)
	fs.SetOutput(stderr)
	only := fs.String("only", "", "comma-separated parts to clean: database, testdbs, redis, files (default: all)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/devclean [-only database,testdbs,redis,files]")
		fmt.Fprintln(stderr, "Removes what make run and make test leave behind (see the README's \"Cleaning up\").")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	parts := map[string]bool{"database": true, "testdbs": true, "redis": true, "files": true}
	if *only != "" {
		want := map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			if !parts[p] {
				fmt.Fprintf(stderr, "devclean: unknown part %q (database, testdbs, redis, files)\n", p)
				return 2
			}
			want[p] = true
		}
		parts = want
	}

	plan, closeFn, err := planFromEnv(parts)
	if err != nil {
		fmt.Fprintln(stderr, "devclean:", err)
		return 1
	}
	defer closeFn()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	r := Clean(ctx, plan)
	r.Print(stdout)
	if len(r.Errs) > 0 {
		return 1
	}
	return 0
}

// planFromEnv builds the plan of the chosen parts from the service's configuration, after
// the safety checks of the package comment.
func planFromEnv(parts map[string]bool) (Plan, func(), error) {
	none := func() {}
	cfg, err := config.Load()
	if err != nil {
		return Plan{}, none, err
	}
	if cfg.Production() {
		return Plan{}, none, errors.New("APP_ENV=production: refusing to remove anything")
	}
	wd, err := os.Getwd()
	if err == nil {
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		return Plan{}, none, err
	}
	p := Plan{Root: wd}
	if parts["database"] {
		admin, name, err := maintenanceURL(cfg.MigrateDatabaseURL, "MIGRATE_DATABASE_URL")
		if err != nil {
			return Plan{}, none, err
		}
		p.Databases = append(p.Databases, DatabaseSet{AdminURL: admin, Names: []string{name}})
	}
	if parts["testdbs"] {
		admin, _, err := maintenanceURL(pgtest.AdminURL(), "TEST_DATABASE_URL")
		if err != nil {
			return Plan{}, none, err
		}
		p.Databases = append(p.Databases, DatabaseSet{AdminURL: admin, Prefixes: testDatabasePrefixes})
	}
	closeFn := none
	if parts["redis"] {
		rdb, err := redisClient(cfg)
		if err != nil {
			return Plan{}, none, err
		}
		p.Redis, closeFn = rdb, func() { _ = rdb.Close() }
		p.KeyPrefixes = []string{cfg.BullMQPrefix, envOr("STREAM_PREFIX", "listing")}
	}
	if parts["files"] {
		if cfg.S3Bucket == "" {
			p.Dirs = append(p.Dirs, cfg.StorageDir)
		}
		p.Dirs = append(p.Dirs, "bin", filepath.Join("tests", "bullmqnode", "node_modules"))
	}
	return p, closeFn, nil
}

// maintenanceURL returns raw (a PostgreSQL URL of the variable named) with the maintenance
// database "postgres" instead of its own, and its own database's name. The server must be
// this machine.
func maintenanceURL(raw, variable string) (admin, database string, err error) {
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return "", "", fmt.Errorf("%s: invalid (details withheld: they may contain a password)", variable)
	}
	if !loopbackHost(cfg.Host) {
		return "", "", fmt.Errorf("%s names a server that is not on this machine: refusing to drop databases there", variable)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "", "", fmt.Errorf("%s: give it as a postgres:// URL", variable)
	}
	database = cfg.Database
	if database == "" {
		return "", "", fmt.Errorf("%s names no database", variable)
	}
	u.Path = "/postgres"
	return u.String(), database, nil
}

// redisClient returns a client of the service's Redis (a cluster client with
// REDIS_CLUSTER_ADDRS), which must be on this machine.
func redisClient(cfg config.Config) (redis.UniversalClient, error) {
	opts, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return nil, errors.New("REDIS_URL: invalid (details withheld: they may contain a password)")
	}
	if len(cfg.RedisClusterAddrs) == 0 {
		if !loopbackHost(opts.Addr) {
			return nil, errors.New("REDIS_URL names a Redis that is not on this machine: refusing to delete keys there")
		}
		return redis.NewClient(opts), nil
	}
	for _, a := range cfg.RedisClusterAddrs {
		if !loopbackHost(a) {
			return nil, errors.New("REDIS_CLUSTER_ADDRS names a node that is not on this machine: refusing to delete keys there")
		}
	}
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: cfg.RedisClusterAddrs, Username: opts.Username,
		Password: opts.Password, TLSConfig: opts.TLSConfig}), nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
