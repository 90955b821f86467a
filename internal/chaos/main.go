// Command chaos runs the built service under load while it breaks it, then checks that every
// accepted operation still ends and that nothing was done twice (issue 10, "Done when"):
//
//	make chaos
//	go run ./internal/chaos -duration 3m -clients 24
//	go run ./internal/chaos -h
//
// What it starts, all of its own so that nothing shared is disturbed:
//
//   - a scratch database listing_chaos_<random> on the server named by -admin-url (a
//     superuser), migrated with postgres.Migrate like `app migrate` does in development, and
//     used by the children as app_user (RLS applies); dropped at the end unless -keep or a
//     check failed;
//   - a Redis of its own (redis-server --port N --save "" --appendonly no --daemonize yes):
//     restarting it loses every job, exactly as a Redis without persistence does; the shared
//     Redis on 6379 is never touched;
//   - bin/app built without -race, run as children: 1 `serve`, 2 `dispatch`, 2 `work`, with a
//     BullMQ prefix of their own and the settings of the flags below (short reconciliation
//     thresholds so that a run takes minutes); each child's output goes to <dir>/<name>.log;
//   - in this process: one marketplace sandbox shared by both work processes (so a product
//     created twice by two processes shows up in its products_by_external_ref), one AI
//     sandbox, and a tiny HTTP server of PNGs for material transfers.
//
// The run: -accounts accounts are registered, each of -clients clients creates a store and
// waits until it is verified, then for -duration the clients create stores, products,
// first publications, product syncs, AI tasks and material transfers, retrying network
// errors, 5xx and "request in progress" with the same Idempotency-Key and body, as real
// clients do. A request is accepted when it was answered 2xx with an operation. Meanwhile,
// every -chaos-every on average, one chaos action from -chaos runs: SIGKILL of a random
// dispatch or work process or of serve (each comes back after up to -restart-delay), a
// restart of the Redis (SHUTDOWN NOSAVE, then a fresh empty server), or pg_terminate_backend
// of every app_user session of the scratch database. The marketplace ignores
// Idempotency-Key during every other -ignore-key-period and for the whole settling phase, so
// that its lookup by external_ref is then the workers' only guard against a second product.
//
// Then the chaos and the load stop, everything is brought back up, and the harness waits
// for every operation in the database to be terminal, at most the bound the settings imply
// plus -settle-grace (to tell "late" from "never"). The report gives the accepted requests,
// the operations by type, status and error code, the time from the end of the chaos to the
// last terminal operation against the bound, the reconciliations (with DELIVERY_EXHAUSTED by
// handler runs, and failed publications that nevertheless left a product on the platform),
// the duplicates (platform products per publication external_ref, publications sharing a
// platform product, AI ledger rows per task, stores per shop, and rows per table against the
// requests that could have made them) and every operation still not terminal, with its task
// and outbox rows. The exit status is 1 when an operation is not terminal, one finished late,
// a task disagrees with its operation, or something was duplicated.
//
// Unpaced (the default), the clients submit faster than the publication workers drain on a
// small machine: the queue backs up, and the reconciler then also meets tasks that merely
// wait in it. -rate caps the clients' actions per second to keep the queues short.
//
// The bound: an operation whose job was lost or whose dispatcher died is delivered again at
// worst after the outbox lease (a claim of a killed dispatcher) or after RECONCILE_AFTER plus
// RECONCILE_INTERVAL × 2^min(n, 6) (a task whose job is gone: the reconciler's backoff after
// the task's n-th free redelivery, one sweep included; n is the most free redeliveries of any
// task, read at the end), and the job that follows takes at most the longer of
// JOB_LOCK_DURATION + JOB_STALLED_INTERVAL (its worker died) and its call fence (two
// PLATFORM_TIMEOUTs and the fence's margin: the next delivery waits for a dead worker's
// call), plus the backoff of JOB_ATTEMPTS plus -job-budget of handler time. The bound does not
// cover the time a backlog takes to drain at the workers' rate (unpaced clients build one):
// it runs from the later of the chaos stop and the moment the backlog left at the chaos stop
// had drained, the first time the queues held no waiting job and the outbox no pending
// event. The harness states the bound at start (with n = 0) and the one it checks, with the
// drain, in its report.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// options are the flags.
type options struct {
	duration        time.Duration
	clients         int
	accounts        int
	rate            float64
	chaosEvery      time.Duration
	chaos           string
	restartDelay    time.Duration
	ignoreKeyPeriod time.Duration
	settleGrace     time.Duration
	jobBudget       time.Duration
	requestBudget   time.Duration
	sandboxLatency  time.Duration
	adminURL        string
	redisPort       int
	dir             string
	keep            bool
	seed            uint64

	// Settings of the children (environment variables of the service).
	lock            time.Duration
	stalledInterval time.Duration
	maxStalls       int
	jobAttempts     int
	concurrency     int
	lease           time.Duration
	after           time.Duration
	interval        time.Duration
	reconcileMax    int
	maxConns        int
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: go run ./internal/chaos [flags]\n\n"+
			"Runs serve, 2 dispatch and 2 work processes of bin/app on a scratch database and a Redis of\n"+
			"its own, loads them with retrying clients while killing processes, restarting Redis and\n"+
			"dropping database connections, then checks that every accepted operation ends within the\n"+
			"bound and that nothing was duplicated. See the package comment for details.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the load and the chaos run")
	fs.IntVar(&o.clients, "clients", 24, "concurrent clients")
	fs.IntVar(&o.accounts, "accounts", 4, "accounts (workspaces) the clients share")
	fs.Float64Var(&o.rate, "rate", 0, "client actions per second, all clients together (0: as fast as the API answers; the queues may then fall behind)")
	fs.DurationVar(&o.chaosEvery, "chaos-every", 4*time.Second, "mean interval between chaos actions")
	fs.StringVar(&o.chaos, "chaos", "work,dispatch,serve,redis,pg", "chaos actions to draw from (comma-separated; repeat one to weigh it more; empty: none)")
	fs.DurationVar(&o.restartDelay, "restart-delay", 3*time.Second, "longest a killed process or Redis stays down")
	fs.DurationVar(&o.ignoreKeyPeriod, "ignore-key-period", 30*time.Second, "the marketplace ignores Idempotency-Key every other period of this length (0: never during the load)")
	fs.DurationVar(&o.settleGrace, "settle-grace", 2*time.Minute, "how long to keep waiting after the bound, to tell late operations from stuck ones")
	fs.DurationVar(&o.jobBudget, "job-budget", 20*time.Second, "handler time one job may take, counted in the bound")
	fs.DurationVar(&o.requestBudget, "request-budget", 2*time.Minute, "how long a client retries one request before it gives up on it")
	fs.DurationVar(&o.sandboxLatency, "sandbox-latency", 50*time.Millisecond, "latency of every marketplace call (widens the windows the kills hit)")
	fs.StringVar(&o.adminURL, "admin-url", defaultAdminURL(), "PostgreSQL superuser URL (TEST_DATABASE_URL)")
	fs.IntVar(&o.redisPort, "redis-port", 0, "port of the harness's own redis-server (0: a free port)")
	fs.StringVar(&o.dir, "dir", "", "directory of the children's logs and the Redis files (default var/chaos/<time>)")
	fs.BoolVar(&o.keep, "keep", false, "keep the scratch database even when every check passed")
	fs.Uint64Var(&o.seed, "seed", 0, "random seed (0: from the clock)")

	fs.DurationVar(&o.lock, "lock", 5*time.Second, "JOB_LOCK_DURATION")
	fs.DurationVar(&o.stalledInterval, "stalled-interval", 2*time.Second, "JOB_STALLED_INTERVAL")
	fs.IntVar(&o.maxStalls, "max-stalls", 5, "JOB_MAX_STALLS")
	fs.IntVar(&o.jobAttempts, "job-attempts", 3, "JOB_ATTEMPTS")
	fs.IntVar(&o.concurrency, "concurrency", 4, "WORKER_CONCURRENCY")
	fs.DurationVar(&o.lease, "lease", 15*time.Second, "OUTBOX_LEASE (must exceed the dispatcher's 10 s publish timeout)")
	fs.DurationVar(&o.after, "after", 15*time.Second, "RECONCILE_AFTER")
	fs.DurationVar(&o.interval, "interval", 2*time.Second, "RECONCILE_INTERVAL")
	fs.IntVar(&o.reconcileMax, "reconcile-max", 3, "RECONCILE_MAX")
	fs.IntVar(&o.maxConns, "max-conns", 6, "DATABASE_MAX_CONNS of each child")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.clients < 1 || o.accounts < 1 || o.duration <= 0 {
		return o, fmt.Errorf("-clients, -accounts and -duration must be positive")
	}
	if o.dir == "" {
		o.dir = filepath.Join("var", "chaos", time.Now().Format("20060102-150405"))
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	for _, a := range o.actions() {
		if _, ok := chaosActions[a]; !ok {
			return o, fmt.Errorf("-chaos: unknown action %q", a)
		}
	}
	return o, nil
}

func (o options) actions() []string {
	var out []string
	for _, a := range strings.Split(o.chaos, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// backoff is the sum of the retry delays of JOB_ATTEMPTS (config.JobBackoff × 2^(n-1)).
func (o options) backoff() time.Duration {
	var d time.Duration
	for n := 1; n < o.jobAttempts && n < 32; n++ {
		d += time.Second << (n - 1)
	}
	return d
}

// maxRedeliveryDoublings is port.MaxRedeliveryDoublings: the reconciler's backoff of a task
// delivered again without running stops doubling after this many redeliveries.
const maxRedeliveryDoublings = 6

// fenceMargin is worker.FenceMargin.
const fenceMargin = time.Second

// bound is how long after the chaos stopped, or after the backlog left then drained if later,
// every operation must be terminal when no task was delivered again for free more than
// redeliveries times (see the package comment).
func (o options) bound(redeliveries int) time.Duration {
	job := o.lock + o.stalledInterval
	if fence := 2*o.platformTimeout() + fenceMargin; fence > job {
		job = fence
	}
	return o.lease + o.after + o.interval<<min(max(redeliveries, 0), maxRedeliveryDoublings) + job + o.backoff() + o.jobBudget
}

// platformTimeout is the children's PLATFORM_TIMEOUT (and AI_TIMEOUT, FETCH_TIMEOUT).
func (o options) platformTimeout() time.Duration { return o.lock / 2 }

func defaultAdminURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if err == flag.ErrHelp {
			return
		}
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	h := &harness{o: o, log: log, rnd: rand.New(rand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))}
	ok, err := h.run(ctx)
	if err != nil {
		log.Error("chaos run failed", "err", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}
