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
	shared := fs.Bool("shared", false, "also the shared defaults other checkouts use: the `listing` database, every template and test database on the server, the default key prefixes (bull, listing)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: go run ./internal/devclean [-only database,testdbs,redis,files] [-shared]")
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

	root, err := os.Getwd()
	if err == nil {
		root, err = filepath.EvalSymlinks(root)
	}
	if err != nil {
		fmt.Fprintln(stderr, "devclean:", err)
		return 1
	}
	plan, closeFn, err := planFromEnv(parts, *shared, root)
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

// Shared defaults: names every checkout on the machine uses unless configured otherwise.
const (
	defaultDatabase     = "listing"
	defaultBullMQPrefix = "bull"
	defaultStreamPrefix = "listing"
)

// planFromEnv builds the plan of the chosen parts from the service's configuration and the
// checkout's record of the test databases (pgtest.RecordPath, under root), after the safety
// checks of the package comment. Without shared, the shared defaults are left (and said so).
func planFromEnv(parts map[string]bool, shared bool, root string) (Plan, func(), error) {
	none := func() {}
	cfg, err := config.Load()
	if err != nil {
		return Plan{}, none, err
	}
	if cfg.Production() {
		return Plan{}, none, errors.New("APP_ENV=production: refusing to remove anything")
	}
	p := Plan{Root: root}
	if parts["database"] {
		admin, name, err := maintenanceURL(cfg.MigrateDatabaseURL, "MIGRATE_DATABASE_URL")
		if err != nil {
			return Plan{}, none, err
		}
		if name == defaultDatabase && !shared {
			p.Skipped = append(p.Skipped, "database "+name+" (the shared default: -shared removes it)")
		} else {
			p.Databases = append(p.Databases, DatabaseSet{AdminURL: admin, Names: []string{name}})
		}
	}
	if parts["testdbs"] {
		admin, _, err := maintenanceURL(pgtest.AdminURL(), "TEST_DATABASE_URL")
		if err != nil {
			return Plan{}, none, err
		}
		set := DatabaseSet{AdminURL: admin, Record: filepath.Join(root, pgtest.RecordPath)}
		tests, templates, err := readRecord(set.Record)
		if err != nil {
			return Plan{}, none, err
		}
		set.Names = tests
		if shared {
			set.Names = append(set.Names, templates...)
			set.Prefixes = testDatabasePrefixes
		} else if len(templates) > 0 {
			p.Skipped = append(p.Skipped, fmt.Sprintf("%d template database(s) this checkout built (other checkouts with the same migrations use them: -shared removes them)", len(templates)))
		}
		p.Databases = append(p.Databases, set)
	}
	closeFn := none
	if parts["redis"] {
		rdb, err := redisClient(cfg)
		if err != nil {
			return Plan{}, none, err
		}
		p.Redis, closeFn = rdb, func() { _ = rdb.Close() }
		for _, pr := range []struct{ prefix, def, variable string }{
			{cfg.BullMQPrefix, defaultBullMQPrefix, "BULLMQ_PREFIX"},
			{envOr("STREAM_PREFIX", defaultStreamPrefix), defaultStreamPrefix, "STREAM_PREFIX"},
		} {
			if pr.prefix == pr.def && !shared {
				p.Skipped = append(p.Skipped, fmt.Sprintf("Redis keys %s:* (%s's shared default: -shared removes them)", pr.prefix, pr.variable))
				continue
			}
			p.KeyPrefixes = append(p.KeyPrefixes, pr.prefix)
		}
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
