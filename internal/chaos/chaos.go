package main

import (
	"context"
	"math"
	"time"
)

// chaosActions are the things the chaos loop does; each returns false when it could not act
// (e.g. the process it drew was already down).
var chaosActions = map[string]func(ctx context.Context, h *harness) bool{
	// SIGKILL of a random worker process; its jobs stall and are taken back by the others.
	"work": func(_ context.Context, h *harness) bool { return h.work[h.intn(len(h.work))].kill() },
	// SIGKILL of a random dispatcher, possibly between publishing a job and marking its
	// event dispatched, or while it holds the reconciler's lock.
	"dispatch": func(_ context.Context, h *harness) bool { return h.dispatch[h.intn(len(h.dispatch))].kill() },
	// SIGKILL of the API with requests in flight; clients retry with their keys.
	"serve": func(_ context.Context, h *harness) bool { return h.serve.kill() },
	// Redis without persistence restarted: every job, lock and deduplication key is lost.
	"redis": func(ctx context.Context, h *harness) bool {
		h.redis.shutdown()
		time.Sleep(h.restartDelay())
		if err := h.redis.start(ctx); err != nil {
			h.log.Error("redis did not come back", "err", err)
		}
		return true
	},
	// Every app_user session of the scratch database dropped, transactions in flight too.
	"pg": func(ctx context.Context, h *harness) bool {
		var n int
		err := h.owner.QueryRow(ctx, `SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND usename = 'app_user') t`).Scan(&n)
		if err != nil {
			h.log.Warn("pg_terminate_backend", "err", err)
			return false
		}
		return n > 0
	},
}

// chaosLoop runs a random action of -chaos at exponentially distributed intervals of mean
// -chaos-every until ctx ends. The Redis action sleeps through its downtime, so two Redis
// restarts never overlap.
func (h *harness) chaosLoop(ctx context.Context) {
	actions := h.o.actions()
	if len(actions) == 0 || h.o.chaosEvery <= 0 {
		return
	}
	for {
		wait := time.Duration(-math.Log(1-h.random()) * float64(h.o.chaosEvery))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		name := actions[h.intn(len(actions))]
		if chaosActions[name](ctx, h) {
			h.chaosDone[name].Add(1)
			h.log.Debug("chaos", "action", name)
		}
	}
}

// ignoreKeyLoop makes the marketplace ignore Idempotency-Key during every other
// -ignore-key-period, starting with a period where it honors it.
func (h *harness) ignoreKeyLoop(ctx context.Context) {
	if h.o.ignoreKeyPeriod <= 0 {
		return
	}
	on := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(h.o.ignoreKeyPeriod):
		}
		on = !on
		h.market.SetIgnoreIdempotencyKey(on)
	}
}
