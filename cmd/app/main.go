// Command app is the listing service: one binary with one subcommand per role.
//
//	app migrate   apply database migrations (MIGRATE_DATABASE_URL, the owner role)
//	app serve     the HTTP API
//	app dispatch  the outbox dispatcher
//	app work      the BullMQ job consumers
//	app commands  the consumer of the command stream (commands sent as messages)
//	app cleanup   retention jobs
//	app outbox    operators' view of the outbox
//	app console   the operators' web console
//	app all       everything in one process (development default)
//
// Run `app help` for the full list. Configuration comes from environment variables (see the
// README); main only sets up signals, logging and the runtime's memory limit (MEMORY_LIMIT,
// unless GOMEMLIMIT is set), then runs the subcommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"syscall"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/tracing"
)

type subcommand struct {
	summary string
	run     func(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error
}

func subcommands() map[string]subcommand {
	return map[string]subcommand{
		"migrate":  {"apply the embedded database migrations (idempotent)", runMigrate},
		"serve":    {"run the HTTP API", runServe},
		"dispatch": {"run the outbox dispatcher (outbox → BullMQ / Redis streams) and the reconciler of stuck tasks", runDispatch},
		"work":     {"run the BullMQ job consumers of every queue", runWork},
		"commands": {"consume the commands other services send on <STREAM_PREFIX>:commands (replies on …:command-replies)", runCommands},
		"cleanup":  {"delete expired idempotency records and old dispatched events (once, or -every D)", runCleanup},
		"outbox":   {"operators: stats | list | show | redrive | purge", runOutbox},
		"console":  {"operators: the web console on CONSOLE_ADDR (outbox, queues, operations)", runConsole},
		"all":      {"migrate, then run every role in one process (development)", runAll},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
}

func realMain(ctx context.Context, args []string) error {
	cmds := subcommands()
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(cmds)
		return nil
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		usage(cmds)
		return fmt.Errorf("unknown subcommand %q", args[0])
	}
	cfg, err := config.Load()
	if err != nil {
		return err
	}
	log, err := newLogger(cfg)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	limit, source := memoryLimit(cfg, os.LookupEnv)
	if source == "MEMORY_LIMIT" {
		debug.SetMemoryLimit(limit)
	}
	log.Info("memory limit", "bytes", limit, "source", source)
	shutdownTracing, err := tracing.Setup(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err := shutdownTracing(context.WithoutCancel(ctx)); err != nil {
			log.Warn("tracing: flushing spans failed", "err", err)
		}
	}()
	err = cmd.run(ctx, cfg, log, args[1:])
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil // stopped by a signal: a clean exit
	}
	return err
}

// memoryLimit returns the Go runtime's soft memory limit for this process and where it comes
// from: the runtime's own when the operator set GOMEMLIMIT (the runtime applied it at
// start), else MEMORY_LIMIT (0: none, math.MaxInt64), which the caller applies.
func memoryLimit(cfg config.Config, lookupEnv func(string) (string, bool)) (int64, string) {
	if v, ok := lookupEnv("GOMEMLIMIT"); ok && v != "" {
		return debug.SetMemoryLimit(-1), "GOMEMLIMIT"
	}
	if cfg.MemoryLimit <= 0 {
		return math.MaxInt64, "MEMORY_LIMIT"
	}
	return int64(cfg.MemoryLimit), "MEMORY_LIMIT"
}

func usage(cmds map[string]subcommand) {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: app <subcommand> [flags]\n\nsubcommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-9s %s\n", n, cmds[n].summary)
	}
	b.WriteString("\nConfiguration is read from the environment; see the README.\n")
	fmt.Fprint(os.Stderr, b.String())
}

func newLogger(cfg config.Config) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch cfg.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("LOG_FORMAT must be json or text")
}
