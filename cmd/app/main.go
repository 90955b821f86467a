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
// `app help` lists them and `app <subcommand> -h` prints a subcommand's flags (exit 0); a
// wrong command line prints the usage and exits 2, a failure exits 1, and SIGINT or SIGTERM
// stop a subcommand cleanly with exit 0. Configuration comes from environment variables (see
// the README); main only sets up signals, logging and the runtime's memory limit
// (MEMORY_LIMIT, unless GOMEMLIMIT is set), then runs the subcommand.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
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
		"outbox":   {"operators: stats | list | show | redrive | purge (`app outbox help`)", runOutbox},
		"console":  {"operators: the web console on CONSOLE_ADDR (outbox, queues, operations)", runConsole},
		"all":      {"migrate, then run every role in one process (development)", runAll},
	}
}

// Exit statuses of the binary.
const (
	exitOK      = 0
	exitFailure = 1
	exitUsage   = 2
)

// usageError is a wrong command line: the usage was printed on stderr, and the binary exits
// with exitUsage.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := realMain(ctx, os.Args[1:])
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

// exitCode returns the exit status of realMain's error and prints the error on stderr: 0 for
// nil and for a help request (flag.ErrHelp), 2 for a usage error, 1 otherwise.
func exitCode(err error, stderr io.Writer) int {
	var usage usageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintln(stderr, "app:", err)
		return exitUsage
	}
	fmt.Fprintln(stderr, "app:", err)
	return exitFailure
}

func realMain(ctx context.Context, args []string) error {
	cmds := subcommands()
	if len(args) == 0 {
		usage(os.Stderr, cmds)
		return usageError{"a subcommand is required"}
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		usage(os.Stdout, cmds)
		return flag.ErrHelp
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		usage(os.Stderr, cmds)
		return usageError{fmt.Sprintf("unknown subcommand %q", args[0])}
	}
	cfg, err := config.Load()
	if err != nil && !helpRequested(args[1:]) { // help needs no valid configuration
		return err
	}
	log, err := newLogger(cfg, os.Stderr)
	if err != nil {
		return err
	}
	slog.SetDefault(log)
	limit, source := memoryLimit(cfg, os.LookupEnv)
	if source == "MEMORY_LIMIT" {
		debug.SetMemoryLimit(limit)
	}
	// Logged once the subcommand's flags parsed: help and usage errors print no log line.
	flagsParsed = sync.OnceFunc(func() { log.Info("memory limit", "bytes", limit, "source", source) })
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
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		log.Info("stopped", "subcommand", args[0], "reason", "signal")
		return nil // stopped by a signal after a clean shutdown
	}
	return err
}

// helpRequested reports whether a subcommand's args ask for help rather than a run: a help
// flag, or "help" as the first argument (`app outbox help`).
func helpRequested(args []string) bool {
	for i, a := range args {
		switch {
		case a == "-h" || a == "-help" || a == "--help" || a == "--h":
			return true
		case a == "help" && i == 0:
			return true
		}
	}
	return false
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

func usage(w io.Writer, cmds map[string]subcommand) {
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
	b.WriteString("\n`app <subcommand> -h` lists a subcommand's flags. Configuration is read from the environment; see the README.\n")
	fmt.Fprint(w, b.String())
}

// newFlags returns the flag set of subcommand name ("outbox list" for a command of a
// subcommand), whose usage names the command and its summary; parse it with parseFlags.
func newFlags(name, summary string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: app %s [flags]\n\n%s\n", name, summary)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n == 0 {
			fmt.Fprintln(w, "\nno flags")
			return
		}
		fmt.Fprintln(w, "\nflags:")
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args into fs, then runs checks on the values (each returns the message of
// a usage error, or ""). -h (or -help) prints the usage and flags on stdout and returns
// flag.ErrHelp (exit 0); a bad flag, a stray argument or a failed check prints them on stderr
// and returns a usageError (exit 2).
func parseFlags(fs *flag.FlagSet, args []string, checks ...func() string) error {
	var buf strings.Builder
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(os.Stdout, buf.String())
		return flag.ErrHelp
	case err != nil:
		// The flag package wrote the error above the usage; the error is printed once, by
		// exitCode, below it.
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return usageError{err.Error()}
	case fs.NArg() > 0:
		fs.SetOutput(os.Stderr)
		fs.Usage()
		return usageError{fmt.Sprintf("%s: unexpected argument %q", fs.Name(), fs.Arg(0))}
	}
	fs.SetOutput(os.Stderr)
	for _, check := range checks {
		if msg := check(); msg != "" {
			fs.Usage()
			return usageError{msg}
		}
	}
	flagsParsed()
	return nil
}

// flagsParsed runs when parseFlags accepts a command line: realMain's start-up log lines,
// which a help request or a usage error must not print.
var flagsParsed = func() {}

// newLogger returns the process's logger on w (LOG_LEVEL, LOG_FORMAT). Durations are logged
// as strings ("30s"), never as nanoseconds.
func newLogger(cfg config.Config, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
	switch cfg.LogFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("LOG_FORMAT must be json or text")
}

// durationsAsText is a slog ReplaceAttr that writes a duration as time.Duration.String does.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}
