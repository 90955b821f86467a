// Command demo is `make demo`: it starts a throwaway instance of the service (`app all` on a
// database, ports, Redis prefix and storage directory of its own), walks through every flow
// of the README over HTTP, prints each step and its operation's final state, and removes
// everything it started, also on failure or Ctrl-C (internal/demo). It exits 0 when every
// step went as documented, 130 when interrupted, 1 otherwise.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/listingkit/listing/internal/demo"
)

func main() {
	app := flag.String("app", "bin/app", "the app binary (`make build`)")
	image := flag.String("image", "docs/demo/mug.png", "the PNG the media and material-transfer steps send")
	pg := flag.String("postgres", envOr("DEMO_POSTGRES_URL", "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"),
		"a superuser's URL of the PostgreSQL to use (DEMO_POSTGRES_URL); the demo creates and drops a database of its own there")
	rdb := flag.String("redis", envOr("DEMO_REDIS_URL", "redis://127.0.0.1:6379/0"),
		"the Redis to use (DEMO_REDIS_URL); the demo's keys live under a prefix of its own and are deleted at the end")
	flag.Parse()
	// A closed output (`make demo | head`) must not kill the demo before it removed what it
	// started: writes then fail quietly instead.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := demo.Run(ctx, demo.Config{App: *app, Image: *image, PostgresURL: *pg, RedisURL: *rdb, Out: os.Stdout})
	interrupted := ctx.Err() != nil
	stop()
	switch {
	case interrupted:
		os.Exit(130)
	case err != nil:
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
