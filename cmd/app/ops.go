package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// errMemoryNeedsAll refuses dispatch or work alone with in-process queues: nothing would
// consume what the dispatcher publishes, or publish what the workers wait for.
var errMemoryNeedsAll = errors.New("QUEUE_TRANSPORT=memory runs the dispatcher and the workers in one process: use `app all`")

func runDispatch(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("dispatch", flag.ContinueOnError)
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, "serve /healthz, /readyz and /metrics on this address (ADMIN_ADDR; empty: none)")
	if err := fs.Parse(args); err != nil {
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
	return runWithAdmin(ctx, *adminAddr, reg, readiness(cfg, d.Pool, d.Redis), log, d.Run)
}

func runWork(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("work", flag.ContinueOnError)
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, "serve /healthz, /readyz and /metrics on this address (ADMIN_ADDR; empty: none)")
	if err := fs.Parse(args); err != nil {
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
	return runWithAdmin(ctx, *adminAddr, reg, readiness(cfg, w.Pool, w.Redis), log, w.Run)
}

// runCommands runs the consumer of the command stream: commands that other services send as
// messages, executed through the API's endpoints and command bus. It is a transport of the
// API, not a worker: it needs what `serve` needs (the bus, FINGERPRINT_KEYS, CREDENTIALS_KEYS)
// and none of the external systems `work` calls, and it scales with the commands other
// services send, not with the jobs.
func runCommands(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("commands", flag.ContinueOnError)
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, "serve /healthz, /readyz and /metrics on this address (ADMIN_ADDR; empty: none)")
	if err := fs.Parse(args); err != nil {
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
	return runWithAdmin(ctx, *adminAddr, reg, readiness(cfg, api.Pool, api.Redis), log, api.Commands.Run)
}

func runCleanup(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	every := fs.Duration("every", 0, "run on this schedule until stopped (0: once), e.g. 10m")
	adminAddr := fs.String("admin-addr", cfg.AdminAddr, "with -every: serve /healthz, /readyz and /metrics on this address (ADMIN_ADDR; empty: none)")
	if err := fs.Parse(args); err != nil {
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
	return runWithAdmin(ctx, *adminAddr, reg, readiness(cfg, c.Pool, nil), log, func(ctx context.Context) error {
		return cleanupLoop(ctx, c, *every, log)
	})
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

// runOutbox is the operators' tool: stats, list, show, redrive, purge, as listing_operator
// (OPERATOR_DATABASE_URL).
func runOutbox(ctx context.Context, cfg config.Config, log *slog.Logger, args []string) error {
	if len(args) == 0 {
		return errors.New("usage: app outbox stats | list -workspace ID [-status S] | show -workspace ID -id EVENT | (redrive | purge) -workspace ID (-id EVENT,... | -all) -by NAME -reason TEXT")
	}
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: cfg.OperatorDatabaseURL, MaxConns: 2})
	if err != nil {
		return err
	}
	defer pool.Close()
	ops := outbox.NewOps(pool)

	fs := flag.NewFlagSet("outbox "+args[0], flag.ContinueOnError)
	ws := fs.String("workspace", "", "workspace id")
	status := fs.String("status", "", "filter by status (pending, dispatching, dispatched, dead_letter)")
	limit := fs.Int("limit", 50, "how many events to list")
	ids := fs.String("id", "", "event id (comma-separated for redrive and purge)")
	all := fs.Bool("all", false, "redrive or purge every dead letter of the workspace")
	by := fs.String("by", "", "who redrives or purges (recorded)")
	reason := fs.String("reason", "", "why (recorded)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	out := json.NewEncoder(os.Stdout)
	out.SetIndent("", "  ")

	switch args[0] {
	case "stats":
		st, err := ops.Stats(ctx)
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"at": st.At, "by_status": st.ByStatus, "oldest_pending_age_seconds": st.OldestPendingAge.Seconds()})
	case "list":
		w, err := uuid.Parse(*ws)
		if err != nil {
			return errors.New("-workspace must be a workspace id")
		}
		items, err := ops.List(ctx, outbox.ListParams{WorkspaceID: w, Status: *status, Limit: *limit})
		if err != nil {
			return err
		}
		return out.Encode(map[string]any{"items": items})
	case "show":
		w, err1 := uuid.Parse(*ws)
		id, err2 := uuid.Parse(*ids)
		if err1 != nil || err2 != nil {
			return errors.New("-workspace and -id must be ids")
		}
		ev, err := ops.Show(ctx, w, id)
		if err != nil {
			return err
		}
		return out.Encode(ev)
	case "redrive", "purge":
		w, err := uuid.Parse(*ws)
		if err != nil {
			return errors.New("-workspace must be a workspace id")
		}
		p := outbox.DeadLetters{WorkspaceID: w, All: *all, By: strings.TrimSpace(*by), Reason: *reason}
		for _, s := range strings.Split(*ids, ",") {
			if s = strings.TrimSpace(s); s == "" {
				continue
			}
			id, err := uuid.Parse(s)
			if err != nil {
				return fmt.Errorf("-id %q is not an event id", s)
			}
			p.EventIDs = append(p.EventIDs, id)
		}
		act, key := ops.Redrive, "redriven"
		if args[0] == "purge" {
			act, key = ops.Purge, "purged"
		}
		done, err := act(ctx, p)
		if err != nil {
			return err
		}
		log.Info("outbox "+args[0], "workspace_id", w.String(), "events", len(done), "by", p.By)
		return out.Encode(map[string]any{key: done})
	}
	return fmt.Errorf("unknown outbox command %q", args[0])
}
