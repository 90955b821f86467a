package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// errMemoryNeedsAll refuses dispatch or work alone with in-process queues: nothing would
// consume what the dispatcher publishes, or publish what the workers wait for.
var errMemoryNeedsAll = errors.New("QUEUE_TRANSPORT=memory runs the dispatcher and the workers in one process: use `app all`")

const adminAddrUsage = "serve /healthz, /readyz and /metrics on this address (ADMIN_ADDR; empty: none)"

func runDispatch(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	adminAddr, err := parseAdminFlags("dispatch", cfg, args)
	if err != nil {
		return err
	}
	if cfg.Memory() {
		return errMemoryNeedsAll
	}
	reg := listing.NewRegistry()
	d, cleanup, err := listing.InitializeDispatch(ctx, cfg, listing.NewQueues(cfg), reg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return serveRole(ctx, cfg, log, adminAddr, reg, readiness(cfg, d.Pool, d.Redis),
		func(s *startup) { s.role("dispatch", "reconcile") }, d.Run)
}

func runWork(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	adminAddr, err := parseAdminFlags("work", cfg, args)
	if err != nil {
		return err
	}
	if cfg.Memory() {
		return errMemoryNeedsAll
	}
	reg := listing.NewRegistry()
	w, cleanup, err := listing.InitializeWork(ctx, cfg, listing.NewQueues(cfg), reg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return serveRole(ctx, cfg, log, adminAddr, reg, readiness(cfg, w.Pool, w.Redis),
		func(s *startup) { s.role("work"); s.sandboxes(w) }, w.Run)
}

// runCommands runs the consumer of the command stream: commands that other services send as
// messages, executed through the API's endpoints and command bus. It is a transport of the
// API, not a worker: it needs what `serve` needs (the bus, FINGERPRINT_KEYS, CREDENTIALS_KEYS)
// and none of the external systems `work` calls, and it scales with the commands other
// services send, not with the jobs.
func runCommands(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	adminAddr, err := parseAdminFlags("commands", cfg, args)
	if err != nil {
		return err
	}
	if cfg.Memory() {
		return errors.New("QUEUE_TRANSPORT=memory: the command stream needs Redis; use the bullmq transport")
	}
	reg := listing.NewRegistry()
	api, cleanup, err := listing.InitializeAPI(ctx, cfg, listing.Options{}, reg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	return serveRole(ctx, cfg, log, adminAddr, reg, readiness(cfg, api.Pool, api.Redis),
		func(s *startup) { s.role("commands") }, api.Commands.Run)
}

// parseAdminFlags parses the flags of a subcommand whose only flag is -admin-addr, and
// returns that address.
func parseAdminFlags(name string, cfg config.Config, args []string) (string, error) {
	fs := newFlags(name, subcommands()[name].summary)
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, adminAddrUsage)
	err := parseFlags(fs, args)
	return *adminAddr, err
}

// serveRole runs a long-running role in a process of its own: it listens on adminAddr (empty:
// nowhere), logs the start-up line that describe fills in (with the admin address), and runs
// run beside /healthz, /readyz (checks) and /metrics (reg) until ctx ends.
func serveRole(ctx context.Context, cfg config.Config, log *slog.Logger, adminAddr string, reg *prometheus.Registry,
	checks []check, describe func(*startup), run func(context.Context) error) error {
	ln, err := adminListener(adminAddr)
	if err != nil {
		return err
	}
	var s startup
	describe(&s)
	s.admin(ln)
	s.log(log)
	return runWithAdmin(ctx, ln, reg, checks, log, run)
}

func runCleanup(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := newFlags("cleanup", subcommands()["cleanup"].summary)
	every := fs.Duration("every", 0, "run on this schedule until stopped (0: once), e.g. 10m")
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, "with -every: "+adminAddrUsage)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	reg := listing.NewRegistry()
	c, cleanup, err := listing.InitializeCleanup(ctx, cfg, reg, log)
	if err != nil {
		return err
	}
	defer cleanup()
	if *every <= 0 {
		return c.RunOnce(ctx, log)
	}
	return serveRole(ctx, cfg, log, *adminAddr, reg, readiness(cfg, c.Pool, nil),
		func(s *startup) { s.role("cleanup"); s.add("every", *every) },
		func(ctx context.Context) error { return cleanupLoop(ctx, c, *every, log) })
}

// cleanupLoop runs the retention jobs now and then every interval until ctx ends. A failed
// round is logged and tried again at the next tick.
func cleanupLoop(ctx context.Context, c *listing.Cleanup, every time.Duration, log *slog.Logger) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := c.RunOnce(ctx, log); err != nil && ctx.Err() == nil {
			log.Error("cleanup failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// outboxCommands are the commands of `app outbox`, in the order its usage lists them.
var outboxCommands = []struct{ name, args, summary string }{
	{"stats", "", "events owed per status across workspaces, the age of the oldest undelivered one, and those delivered in the last hour (per minute and destination)"},
	{"list", "-workspace ID [-status S] [-limit N]", "a workspace's events, newest first"},
	{"show", "-workspace ID -id EVENT", "one event with its payload, metadata and redrive history"},
	{"redrive", "-workspace ID (-id EVENT,... | -all) -by NAME -reason TEXT", "send dead letters again (recorded in outbox_redrives)"},
	{"purge", "-workspace ID (-id EVENT,... | -all) -by NAME -reason TEXT", "delete dead letters for good (recorded in outbox_purges)"},
}

func outboxUsage(w io.Writer) {
	var b strings.Builder
	b.WriteString("usage: app outbox <command> [flags]\n\nThe operators' view of the outbox, as listing_operator (OPERATOR_DATABASE_URL). Output is JSON.\n\ncommands:\n")
	for _, c := range outboxCommands {
		fmt.Fprintf(&b, "  %-8s %s\n", c.name, c.summary)
		if c.args != "" {
			fmt.Fprintf(&b, "  %-8s   %s\n", "", c.args)
		}
	}
	b.WriteString("\n`app outbox <command> -h` lists a command's flags.\n")
	fmt.Fprint(w, b.String())
}

// runOutbox is the operators' tool: stats, list, show, redrive, purge, as listing_operator
// (OPERATOR_DATABASE_URL). It prints JSON on stdout: snake_case keys, lists as [] when empty.
func runOutbox(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	if len(args) == 0 {
		outboxUsage(os.Stderr)
		return usageError{"outbox: a command is required"}
	}
	switch args[0] {
	case "help", "-h", "-help", "--help":
		outboxUsage(os.Stdout)
		return flag.ErrHelp
	}
	name, summary := args[0], ""
	for _, c := range outboxCommands {
		if c.name == name {
			summary = c.summary
		}
	}
	if summary == "" {
		outboxUsage(os.Stderr)
		return usageError{fmt.Sprintf("outbox: unknown command %q", name)}
	}
	fs := newFlags("outbox "+name, summary)
	var ws, status, ids, by, reason *string
	var limit *int
	var all *bool
	if name != "stats" {
		ws = fs.String("workspace", "", "workspace id (required)")
	}
	switch name {
	case "list":
		status = fs.String("status", "", "only events of this status: pending, held, dispatching, dispatched or dead_letter")
		limit = fs.Int("limit", 50, "how many events to list (at most 1000)")
	case "show":
		ids = fs.String("id", "", "event id (required)")
	case "redrive", "purge":
		ids = fs.String("id", "", "event ids, comma-separated (or -all)")
		all = fs.Bool("all", false, "every dead letter of the workspace")
		by = fs.String("by", "", "who acts (required; recorded)")
		reason = fs.String("reason", "", "why (required; recorded)")
	}
	var w uuid.UUID
	var eventIDs []uuid.UUID
	parseIDs := func() string {
		if ws != nil {
			var err error
			if w, err = uuid.Parse(*ws); err != nil {
				return "-workspace must be a workspace id"
			}
		}
		if ids == nil {
			return ""
		}
		for _, s := range strings.Split(*ids, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := uuid.Parse(s)
			if err != nil {
				return fmt.Sprintf("-id %q is not an event id", s)
			}
			eventIDs = append(eventIDs, id)
		}
		if name == "show" && len(eventIDs) != 1 {
			return "-id must be one event id"
		}
		return ""
	}
	if err := parseFlags(fs, args[1:], parseIDs); err != nil {
		return err
	}

	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.OperatorDatabaseURL, MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	ops := outbox.NewOps(pool)
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")

	switch name {
	case "stats":
		st, err := ops.Stats(ctx)
		if err != nil {
			return err
		}
		return out.Encode(outboxStatsJSON{At: st.At, ByStatus: st.ByStatus, OldestPendingAgeSeconds: st.OldestPendingAge.Seconds(),
			Delivered: st.Delivered, DeliveredMaxLatencySeconds: st.Delivered.MaxLatency.Seconds()})
	case "list":
		items, err := ops.List(ctx, outbox.ListParams{WorkspaceID: w, Status: *status, Limit: *limit})
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"items": nonNil(items)})
	case "show":
		ev, err := ops.Show(ctx, w, eventIDs[0])
		if err != nil {
			return err
		}
		ev.Redrives = nonNil(ev.Redrives)
		if ev.Metadata == nil {
			ev.Metadata = map[string]string{}
		}
		return out.Encode(ev)
	}
	p := outbox.DeadLetters{WorkspaceID: w, EventIDs: eventIDs, All: *all, By: strings.TrimSpace(*by), Reason: *reason}
	act, key := ops.Redrive, "redriven"
	if name == "purge" {
		act, key = ops.Purge, "purged"
	}
	done, err := act(ctx, p)
	if err != nil {
		return err
	}
	log.Info("outbox "+name, "workspace_id", w.String(), "events", len(done), "by", p.By)
	return out.Encode(map[string]any{key: nonNil(done)})
}

// outboxStatsJSON is the output of `app outbox stats`.
type outboxStatsJSON struct {
	At                      time.Time                     `json:"at"`
	ByStatus                map[string]outbox.StatusStats `json:"by_status"`
	OldestPendingAgeSeconds float64                       `json:"oldest_pending_age_seconds"`
	// Delivered is the last hour of the log of dispatched events (live statuses are in
	// ByStatus; a delivered event leaves the live table).
	Delivered                  outbox.Delivered `json:"delivered"`
	DeliveredMaxLatencySeconds float64          `json:"delivered_max_latency_seconds"`
}

// nonNil returns s, or an empty slice when s is nil: JSON lists are [], never null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
