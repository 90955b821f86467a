// Command scaleout measures how the outbox dispatcher and the workers scale out over
// processes (issue 15, item 3): 1, 2 and 4 `app dispatch` + `app work` pairs on one
// PostgreSQL and a three-node Redis Cluster drain the same backlog, and it prints, per N,
// the drain time, events/s, duplicates (must be 0), stalls and where the CPU went.
//
//	make bench-scaleout
//	go run ./internal/scaleout -events 100000 -pairs 1,2,4 -perf
//	go run ./internal/scaleout -h
//
// What it starts, all of its own:
//
//   - a three-node Redis Cluster (internal/redistest: redis-server children on free ports,
//     redis-cli --cluster create), every queue hash-tagged (BULLMQ_QUEUE_HASH_TAGS=true);
//   - in this process, the marketplace and AI sandboxes the workers call;
//   - bin/app built without -race: one `serve` that seeds the backlog, then per N the
//     `dispatch` and `work` pairs, with LOG_LEVEL=warn (their output in -dir);
//   - a seed database listing_scaleout_<random> (a superuser's -admin-url), migrated like
//     `app migrate`, and one copy of it per N (CREATE DATABASE … TEMPLATE), all dropped at
//     the end.
//
// The backlog: -workspaces accounts are registered, then stores are created through the API
// (POST …/stores with an Idempotency-Key, -clients at once) while no dispatcher runs, until
// the outbox holds -events pending events: each store writes two, its verification job
// (queue store-verification) and its operation's status change (the integration event
// stream <STREAM_PREFIX>:events). Working a job writes two more status changes (running,
// succeeded) and a store.verified, which the dispatchers drain too.
//
// A run (one N) starts with an empty Redis and a fresh copy of the seeded database and ends
// when no outbox event is undispatched and no operation is unfinished. Its figures: the
// drain time from the start of the processes; backlog events/s (-events over the drain
// time); all events/s (every outbox event dispatched, the workers' included); verifications
// per second; duplicates (marketplace verify calls beyond one per store: a job run twice);
// the CPU the run spent per verification and the verifications/s the machine's CPUs would
// allow at that cost (the "ceiling", which other load on the machine does not skew);
// stalls (jobs whose hash counts a stall, stc) and jobs taken more than once (ats > 1); the
// CPU seconds of the dispatchers, the workers, the run's PostgreSQL backends, each Redis
// node and this process (the sandboxes), from /proc, with the run's share of the machine's
// two cores; and the load average at the start and end. With -perf, perf record samples one
// dispatcher, one worker, the PostgreSQL backends and the Redis nodes for -perf-seconds from
// the fifth second of each run, and the top symbols of each are printed (perf report): the
// profile that says which resource bends the curve. (perf rather than pprof: it profiles the
// unmodified bin/app, PostgreSQL and Redis alike.)
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/redistest"
)

type options struct {
	events      int
	workspaces  int
	clients     int
	pairs       []int
	concurrency int
	maxConns    int
	adminURL    string
	dir         string
	perf        bool
	perfSeconds int
	timeout     time.Duration
}

func main() {
	var o options
	var pairs string
	flag.IntVar(&o.events, "events", 100000, "outbox events in the backlog (two per store)")
	flag.IntVar(&o.workspaces, "workspaces", 200, "workspaces the stores spread over")
	flag.IntVar(&o.clients, "clients", 32, "concurrent API clients while seeding")
	flag.StringVar(&pairs, "pairs", "1,2,4", "numbers of dispatch + work process pairs, one run each")
	flag.IntVar(&o.concurrency, "concurrency", 16, "WORKER_CONCURRENCY of each work process")
	flag.IntVar(&o.maxConns, "max-conns", 8, "DATABASE_MAX_CONNS of each dispatch and work process")
	flag.StringVar(&o.adminURL, "admin-url", "postgres://root@127.0.0.1:5432/postgres?sslmode=disable", "a PostgreSQL superuser")
	flag.StringVar(&o.dir, "dir", "", "where logs and profiles go (default: a new temporary directory)")
	flag.BoolVar(&o.perf, "perf", false, "profile each run with perf record")
	flag.IntVar(&o.perfSeconds, "perf-seconds", 10, "length of the perf window")
	flag.DurationVar(&o.timeout, "timeout", 20*time.Minute, "bound of one run")
	flag.Parse()
	for _, p := range strings.Split(pairs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scaleout: bad -pairs %q\n", pairs)
			os.Exit(2)
		}
		o.pairs = append(o.pairs, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scaleout:", err)
		os.Exit(1)
	}
}

// bench is what every run shares.
type bench struct {
	o        options
	log      *slog.Logger
	bin      string
	cluster  *redistest.Cluster
	rdb      *redis.ClusterClient
	market   *marketplace.Sandbox
	marketAt string
	aiAt     string
	seedDB   string
	stores   int
}

const aiKey = "sk-scaleout"

func run(ctx context.Context, o options) error {
	b := &bench{o: o, log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))}
	if o.dir == "" {
		d, err := os.MkdirTemp("", "scaleout-")
		if err != nil {
			return err
		}
		b.o.dir = d
	}
	if err := os.MkdirAll(b.o.dir, 0o755); err != nil {
		return err
	}
	b.log.Info("scaleout", "dir", b.o.dir, "events", o.events, "workspaces", o.workspaces, "pairs", o.pairs,
		"worker_concurrency", o.concurrency, "max_conns", o.maxConns, "load", loadavg())

	b.bin = filepath.Join(b.o.dir, "app")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "./cmd/app").CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/app (run from the module root): %w\n%s", err, out)
	}
	var err error
	if b.cluster, err = redistest.Start(ctx); err != nil {
		return err
	}
	defer b.cluster.Stop()
	b.rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: b.cluster.Addrs})
	defer b.rdb.Close()

	if b.market, err = marketplace.New(marketplace.Config{}); err != nil {
		return err
	}
	ai, err := aiprovider.New(aiprovider.Config{APIKeys: []string{aiKey}})
	if err != nil {
		return err
	}
	for _, s := range []struct {
		h  http.Handler
		at *string
	}{{b.market, &b.marketAt}, {ai, &b.aiAt}} {
		srv, err := sandbox.Start("", s.h)
		if err != nil {
			return err
		}
		defer srv.Close()
		*s.at = srv.URL
	}

	b.seedDB = "listing_scaleout_" + randomHex(4)
	defer b.drop(b.seedDB)
	if err := b.seed(ctx); err != nil {
		return err
	}
	var results []result
	for _, n := range o.pairs {
		r, err := b.runPairs(ctx, n, o.perf)
		if err != nil {
			return fmt.Errorf("N=%d: %w", n, err)
		}
		results = append(results, r)
		printTable(os.Stdout, b, results[len(results)-1:], len(results) == 1)
	}
	fmt.Println()
	printTable(os.Stdout, b, results, true)
	printPerVerification(os.Stdout, b, results)
	for _, r := range results {
		for _, p := range r.profiles {
			fmt.Printf("\nperf, N=%d, %s (%d s window; by symbol: %% with callees then self %%, Redis self %% only):\n%s", r.n, p.name, o.perfSeconds, p.top)
		}
	}
	return nil
}

// env is the environment of every child for database db.
func (b *bench) env(db string, extra map[string]string) []string {
	m := map[string]string{
		"APP_ENV":                "development",
		"DATABASE_URL":           dbURL(b.o.adminURL, db, "app_user"),
		"MIGRATE_DATABASE_URL":   dbURL(b.o.adminURL, db, ""),
		"DATABASE_MAX_CONNS":     strconv.Itoa(b.o.maxConns),
		"REDIS_CLUSTER_ADDRS":    strings.Join(b.cluster.Addrs, ","),
		"BULLMQ_QUEUE_HASH_TAGS": "true",
		"BULLMQ_PREFIX":          "bull",
		"PLATFORM_BASE_URL":      b.marketAt,
		"AI_BASE_URL":            b.aiAt,
		"AI_API_KEY":             aiKey,
		"WORKER_CONCURRENCY":     strconv.Itoa(b.o.concurrency),
		"LOG_LEVEL":              "warn",
		"LOG_FORMAT":             "text",
		"STORAGE_DIR":            filepath.Join(b.o.dir, "storage"),
		"AUTH_RATE_PER_MINUTE":   "1000000",
	}
	for k, v := range extra {
		m[k] = v
	}
	var env []string
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); m[k] == "" {
			env = append(env, kv)
		}
	}
	for k, v := range m {
		env = append(env, k+"="+v)
	}
	return env
}

// seed creates and migrates the seed database, then creates stores through the API until
// the outbox holds o.events pending events.
func (b *bench) seed(ctx context.Context) error {
	start := time.Now()
	if _, err := postgres.Migrate(ctx, dbURL(b.o.adminURL, b.seedDB, ""), true); err != nil {
		return fmt.Errorf("migrate %s: %w", b.seedDB, err)
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	base := "http://" + addr
	serve, err := b.start("seed-serve", b.env(b.seedDB, map[string]string{"HTTP_ADDR": addr, "PUBLIC_BASE_URL": base,
		"DATABASE_MAX_CONNS": "40", "PASSWORD_HASH_WAIT": "5m"}), "serve")
	if err != nil {
		return err
	}
	defer serve.stop()
	if err := waitHTTP(ctx, base+"/readyz", 60*time.Second); err != nil {
		return err
	}
	type account struct{ token, ws string }
	accounts := make([]account, b.o.workspaces)
	if err := parallel(ctx, b.o.clients, b.o.workspaces, func(i int) error {
		var out struct {
			AccessToken string `json:"access_token"`
			Workspace   struct {
				ID string `json:"id"`
			} `json:"workspace"`
		}
		err := post(ctx, base+"/v1/auth/register", "", map[string]any{"email": fmt.Sprintf("scaleout-%d@example.com", i),
			"password": "correct horse battery staple", "workspace_name": fmt.Sprintf("Workspace %d", i)}, http.StatusCreated, &out)
		accounts[i] = account{out.AccessToken, out.Workspace.ID}
		return err
	}); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	b.stores = b.o.events / 2
	var made atomic.Int64
	if err := parallel(ctx, b.o.clients, b.stores, func(i int) error {
		a := accounts[i%len(accounts)]
		err := post(ctx, base+"/v1/workspaces/"+a.ws+"/stores", a.token, map[string]any{"platform": "sandbox",
			"shop_id": fmt.Sprintf("shop-%d", i), "name": fmt.Sprintf("Shop %d", i),
			"credentials": map[string]string{"api_key": fmt.Sprintf("sk_test_%d", i)}}, http.StatusCreated, nil)
		if n := made.Add(1); n%10000 == 0 {
			b.log.Info("seeding", "stores", n)
		}
		return err
	}); err != nil {
		return fmt.Errorf("create stores: %w", err)
	}
	serve.stop()
	var pending int
	if err := b.query(ctx, b.seedDB, "SELECT count(*) FROM outbox_all_events WHERE status = 'pending'", &pending); err != nil {
		return err
	}
	if pending != 2*b.stores {
		return fmt.Errorf("seeded %d pending events, want %d", pending, 2*b.stores)
	}
	b.log.Info("backlog seeded", "events", pending, "stores", b.stores, "workspaces", b.o.workspaces,
		"took", time.Since(start).Round(time.Second))
	return nil
}

type profile struct{ name, top string }

// result is one run's figures.
type result struct {
	n                      int
	drain                  time.Duration
	backlogRate, allRate   float64
	allEvents              int
	verifyRate             float64
	duplicates             int
	stalls, retaken        int
	cpuDispatch, cpuWork   float64
	cpuPG, cpuSelf         float64
	cpuRedis               []float64
	loadStart, loadEnd     string
	maxOutboxLag, maxQueue int
	profiles               []profile
	// What the run sent, from the counters of PostgreSQL (transactions), of the dispatch and
	// work processes (statements and round trips of their pools, from /metrics) and of the
	// Redis nodes (commands, those Lua scripts run included).
	xacts, statements, roundTrips, redisCmds float64
}

// runPairs drains a fresh copy of the backlog with n dispatch + work pairs.
func (b *bench) runPairs(ctx context.Context, n int, withPerf bool) (result, error) {
	r := result{n: n, loadStart: loadavg()}
	db := fmt.Sprintf("%s_n%d", b.seedDB, n)
	if err := b.exec(ctx, "postgres", "CREATE DATABASE "+pgx.Identifier{db}.Sanitize()+" TEMPLATE "+pgx.Identifier{b.seedDB}.Sanitize()); err != nil {
		return r, err
	}
	defer b.drop(db)
	if err := b.rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.FlushAll(ctx).Err() }); err != nil {
		return r, err
	}
	b.market.Reset()
	var redisCPU0 []float64
	for _, pid := range b.cluster.PIDs() {
		redisCPU0 = append(redisCPU0, cpuSeconds(pid))
	}
	self0 := cpuSeconds(os.Getpid())
	mon, err := pgx.Connect(ctx, dbURL(b.o.adminURL, db, ""))
	if err != nil {
		return r, err
	}
	defer mon.Close(context.Background())
	admin, err := pgx.Connect(ctx, b.o.adminURL)
	if err != nil {
		return r, err
	}
	defer admin.Close(context.Background())
	monPID := int(mon.PgConn().PID())

	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.stop()
		}
	}()
	xacts0, err := xacts(ctx, admin, db)
	if err != nil {
		return r, err
	}
	cmds0, err := b.redisCommands(ctx)
	if err != nil {
		return r, err
	}
	start := time.Now()
	for i := 1; i <= n; i++ {
		for _, role := range []string{"dispatch", "work"} {
			addr, err := freeAddr()
			if err != nil {
				return r, err
			}
			p, err := b.start(fmt.Sprintf("n%d-%s-%d", n, role, i), b.env(db, map[string]string{"ADMIN_ADDR": addr}), role)
			if err != nil {
				return r, err
			}
			p.adminAddr = addr
			procs = append(procs, p)
		}
	}
	b.log.Info("run started", "pairs", n, "db", db, "load", r.loadStart)

	var pgMu sync.Mutex
	var pgPIDs []int
	var perfDone chan []profile
	if withPerf {
		perfDone = make(chan []profile, 1)
		go func() {
			sleepCtx(ctx, 5*time.Second)
			pgMu.Lock()
			pg := append([]int(nil), pgPIDs...)
			pgMu.Unlock()
			perfDone <- b.perf(ctx, n, pg, procs)
		}()
	}

	deadline := time.Now().Add(b.o.timeout)
	lastLog := time.Now()
	for {
		var undispatched, unfinished, waiting int
		if err := mon.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM outbox_all_events WHERE status <> 'dispatched'),
			(SELECT count(*) FROM operations WHERE status NOT IN ('succeeded', 'failed'))`).Scan(&undispatched, &unfinished); err != nil {
			return r, err
		}
		if n, err := b.rdb.LLen(ctx, "bull:{store-verification}:wait").Result(); err == nil {
			waiting = int(n)
		}
		r.maxQueue = max(r.maxQueue, waiting)
		if time.Since(lastLog) >= 2*time.Second {
			lastLog = time.Now()
			b.log.Info("progress", "pairs", n, "elapsed", time.Since(start).Round(100*time.Millisecond),
				"undispatched", undispatched, "unfinished_operations", unfinished, "jobs_waiting", waiting)
		}
		pgMu.Lock()
		pgPIDs = backends(ctx, admin, db, monPID, pgPIDs)
		pgMu.Unlock()
		if undispatched == 0 && unfinished == 0 {
			r.drain = time.Since(start)
			break
		}
		if time.Now().After(deadline) {
			return r, fmt.Errorf("not drained after %s: %d events undispatched, %d operations unfinished", b.o.timeout, undispatched, unfinished)
		}
		for _, p := range procs {
			if p.exited() {
				return r, fmt.Errorf("%s exited; see %s", p.name, p.logPath)
			}
		}
		if err := sleepCtx(ctx, 250*time.Millisecond); err != nil {
			return r, err
		}
	}
	for _, p := range procs {
		if strings.Contains(p.name, "dispatch") {
			r.cpuDispatch += cpuSeconds(p.pid())
		} else {
			r.cpuWork += cpuSeconds(p.pid())
		}
	}
	r.cpuPG = cpuSeconds(pgPIDs...)
	for i, pid := range b.cluster.PIDs() {
		r.cpuRedis = append(r.cpuRedis, cpuSeconds(pid)-redisCPU0[i])
	}
	r.cpuSelf = cpuSeconds(os.Getpid()) - self0
	r.loadEnd = loadavg()
	for _, p := range procs {
		st, rt, err := p.statements(ctx)
		if err != nil {
			return r, fmt.Errorf("%s: %w", p.name, err)
		}
		r.statements += st
		r.roundTrips += rt
	}
	cmds1, err := b.redisCommands(ctx)
	if err != nil {
		return r, err
	}
	r.redisCmds = cmds1 - cmds0
	for _, p := range procs {
		p.stop() // their backends report their last transactions as they end
	}
	xacts1, err := xacts(ctx, admin, db)
	if err != nil {
		return r, err
	}
	r.xacts = xacts1 - xacts0
	if err := mon.QueryRow(ctx, "SELECT count(*) FROM outbox_all_events").Scan(&r.allEvents); err != nil {
		return r, err
	}
	secs := r.drain.Seconds()
	r.backlogRate, r.allRate, r.verifyRate = float64(b.o.events)/secs, float64(r.allEvents)/secs, float64(b.stores)/secs
	r.duplicates = b.market.Calls(marketplace.EndpointVerify) - b.stores
	if err := b.jobStats(ctx, mon, &r); err != nil {
		return r, err
	}
	if perfDone != nil {
		r.profiles = <-perfDone
	}
	b.log.Info("run drained", "pairs", n, "took", r.drain.Round(time.Millisecond), "load", r.loadEnd)
	return r, nil
}

// jobStats reads the stall counter (stc) and the times taken (ats) of every verification job.
func (b *bench) jobStats(ctx context.Context, conn *pgx.Conn, r *result) error {
	rows, err := conn.Query(ctx, "SELECT id::text FROM outbox_all_events WHERE destination = 'store-verification'")
	if err != nil {
		return err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for start := 0; start < len(ids); start += 5000 {
		pipe := b.rdb.Pipeline()
		var cmds []*redis.SliceCmd
		for _, id := range ids[start:min(start+5000, len(ids))] {
			cmds = append(cmds, pipe.HMGet(ctx, "bull:{store-verification}:"+id, "stc", "ats"))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		for _, c := range cmds {
			v := c.Val()
			if s, _ := v[0].(string); s != "" && s != "0" {
				r.stalls++
			}
			if s, _ := v[1].(string); s != "" && s != "1" {
				r.retaken++
			}
		}
	}
	return nil
}

// backends adds to pids those of db's PostgreSQL backends, except the monitor's, read
// through admin (they come and go with the pools; a backend's CPU time is read at the end,
// so each must still live then, as pool connections do).
func backends(ctx context.Context, admin *pgx.Conn, db string, monPID int, pids []int) []int {
	rows, err := admin.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = $1 AND pid <> $2", db, monPID)
	if err != nil {
		return pids
	}
	got, _ := pgx.CollectRows(rows, pgx.RowTo[int32])
	seen := map[int]bool{}
	for _, p := range pids {
		seen[p] = true
	}
	for _, p := range got {
		if !seen[int(p)] {
			pids = append(pids, int(p))
		}
	}
	return pids
}

// perf samples one dispatcher, one worker, db's backends and the Redis nodes for
// perfSeconds and returns the top of each perf report.
func (b *bench) perf(ctx context.Context, n int, pg []int, procs []*proc) []profile {
	var alive []int // backends of connections a pool closed meanwhile are gone
	for _, p := range pg {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", p)); err == nil {
			alive = append(alive, p)
		}
	}
	// Go processes and PostgreSQL: time including callees, by function (what the time is
	// spent doing); Redis: self time.
	targets := []struct {
		name     string
		pids     []int
		children bool
	}{
		{"dispatch-1", []int{procs[0].pid()}, true},
		{"work-1", []int{procs[1].pid()}, true},
		{"postgres backends of the run", alive, true},
		{"redis nodes", b.cluster.PIDs(), false},
	}
	out := make([]profile, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Go(func() {
			data := filepath.Join(b.o.dir, fmt.Sprintf("perf-n%d-%d.data", n, i))
			var pids []string
			for _, p := range t.pids {
				pids = append(pids, strconv.Itoa(p))
			}
			rec := exec.CommandContext(ctx, "perf", "record", "-F", "199", "-g", "-o", data, "-p", strings.Join(pids, ","),
				"--", "sleep", strconv.Itoa(b.o.perfSeconds))
			if o, err := rec.CombinedOutput(); err != nil {
				out[i] = profile{t.name, fmt.Sprintf("perf record failed: %v\n%s", err, o)}
				return
			}
			mode, limit := "--no-children", "1.5"
			if t.children {
				mode, limit = "--children", "4"
			}
			rep, err := exec.CommandContext(ctx, "perf", "report", "-i", data, "--stdio", mode, "-g", "none",
				"--sort", "symbol", "--percent-limit", limit).Output()
			if err != nil {
				out[i] = profile{t.name, fmt.Sprintf("perf report failed: %v", err)}
				return
			}
			var top []string
			for _, l := range strings.Split(string(rep), "\n") {
				l = strings.TrimRight(strings.TrimSpace(l), " -")
				if l == "" || strings.HasPrefix(l, "#") || (t.children && skipFrame(l)) {
					continue
				}
				top = append(top, "  "+l)
				if len(top) == 22 {
					break
				}
			}
			out[i] = profile{t.name, strings.Join(top, "\n") + "\n"}
		})
	}
	wg.Wait()
	return out
}

// skipFrame tells the frames of an inclusive profile that say nothing of the work: the
// scheduler, entry points, unsymbolized addresses.
func skipFrame(l string) bool {
	for _, s := range []string{"[.] 0x", "runtime.", "goexit", "WaitGroup", "errgroup", "__libc_start", "[.] main",
		"PostmasterMain", "PostgresMain", "[k] entry_SYSCALL", "[k] do_syscall_64"} {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}

func printTable(w io.Writer, b *bench, rs []result, header bool) {
	if header {
		fmt.Fprintf(w, "\nbacklog %d events (%d store verifications) in %d workspaces; WORKER_CONCURRENCY=%d, DATABASE_MAX_CONNS=%d per process; %d CPUs\n",
			b.o.events, b.stores, b.o.workspaces, b.o.concurrency, b.o.maxConns, numCPU())
		fmt.Fprintf(w, "%-3s %8s %10s %10s %9s %5s %6s %7s %9s | %-29s | %-17s | %9s %9s | %s\n", "N", "drain s", "backlog/s", "all ev/s",
			"verify/s", "dups", "stalls", "retaken", "max wait", "CPU s: dispatch work pg self", "redis nodes", "CPU ms/v", "ceiling/s",
			"load start → end")
	}
	for _, r := range rs {
		var redisCPU []string
		for _, c := range r.cpuRedis {
			redisCPU = append(redisCPU, fmt.Sprintf("%.1f", c))
		}
		total := r.cpuDispatch + r.cpuWork + r.cpuPG + r.cpuSelf
		for _, c := range r.cpuRedis {
			total += c
		}
		// CPU ms/v is the CPU the whole run spent per verification (its 4 outbox events); the
		// ceiling is the verifications per second the machine's CPUs would allow at that cost
		// with nothing else running: a figure the load of other processes does not skew.
		perVerify := 1000 * total / float64(b.stores)
		fmt.Fprintf(w, "%-3d %8.1f %10.0f %10.0f %9.0f %5d %6d %7d %9d | %6.1f %5.1f %5.1f %5.1f (%3.0f%%) | %-17s | %9.2f %9.0f | %s → %s\n", r.n,
			r.drain.Seconds(), r.backlogRate, r.allRate, r.verifyRate, r.duplicates, r.stalls, r.retaken, r.maxQueue,
			r.cpuDispatch, r.cpuWork, r.cpuPG, r.cpuSelf, 100*total/(r.drain.Seconds()*float64(numCPU())),
			strings.Join(redisCPU, " "), perVerify, 1000*float64(numCPU())/perVerify, r.loadStart, r.loadEnd)
	}
}

// printPerVerification prints what each store verification cost (its job, its outbox events
// and their dispatch): transactions, statements and round trips of the service's pools, Redis
// commands, outbox events, and CPU by side (Go: the dispatch and work processes).
func printPerVerification(w io.Writer, b *bench, rs []result) {
	fmt.Fprintf(w, "\nper store verification (%d each run):\n%-3s %8s %8s %8s %8s %8s | %-33s\n", b.stores, "N", "tx", "stmts",
		"trips", "redis", "outbox", "CPU ms: PostgreSQL Go Redis all")
	v := float64(b.stores)
	for _, r := range rs {
		var redisCPU float64
		for _, c := range r.cpuRedis {
			redisCPU += c
		}
		all := r.cpuPG + r.cpuDispatch + r.cpuWork + redisCPU
		fmt.Fprintf(w, "%-3d %8.2f %8.2f %8.2f %8.1f %8.2f | %10.2f %5.2f %5.2f %5.2f\n", r.n, r.xacts/v, r.statements/v,
			r.roundTrips/v, r.redisCmds/v, float64(r.allEvents)/v, 1000*r.cpuPG/v, 1000*(r.cpuDispatch+r.cpuWork)/v,
			1000*redisCPU/v, 1000*all/v)
	}
}

// ---- children ----

type proc struct {
	name      string
	adminAddr string // where it serves /metrics
	logPath   string
	cmd       *exec.Cmd
	done      chan struct{}
	once      sync.Once
}

func (b *bench) start(name string, env []string, args ...string) (*proc, error) {
	p := &proc{name: name, logPath: filepath.Join(b.o.dir, name+".log"), done: make(chan struct{})}
	f, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(b.bin, args...)
	p.cmd.Env, p.cmd.Stdout, p.cmd.Stderr = env, f, f
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { _ = p.cmd.Wait(); f.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM and waits up to 20 s before SIGKILL.
func (p *proc) stop() {
	p.once.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}

// ---- PostgreSQL ----

func dbURL(admin, db, user string) string {
	u, err := postgres.WithDatabase(admin, db, user)
	if err != nil {
		panic(err)
	}
	return u
}

func (b *bench) exec(ctx context.Context, db, sql string) error {
	conn, err := pgx.Connect(ctx, dbURL(b.o.adminURL, db, ""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

func (b *bench) query(ctx context.Context, db, sql string, dest ...any) error {
	conn, err := pgx.Connect(ctx, dbURL(b.o.adminURL, db, ""))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dest...)
}

func (b *bench) drop(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.exec(ctx, "postgres", "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
		b.log.Warn("drop database", "db", db, "err", err)
	}
}

// ---- HTTP ----

var httpClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

func post(ctx context.Context, u, token string, body any, want int, out any) error {
	raw, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		return fmt.Errorf("POST %s: %d %s", u, resp.StatusCode, data)
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

func waitHTTP(ctx context.Context, u string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		resp, err := http.Get(u)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", u, d)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// ---- small things ----

// parallel runs f(0..n-1) on k goroutines and returns the first error.
func parallel(ctx context.Context, k, n int, f func(i int) error) error {
	var next atomic.Int64
	var first error
	var once sync.Once
	var wg sync.WaitGroup
	for range k {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// cpuSeconds returns the user+system CPU seconds of pids together (0 for one that is gone).
func cpuSeconds(pids ...int) float64 {
	var sum float64
	for _, p := range pids {
		sum += cpuSeconds1(p)
	}
	return sum
}

// cpuSeconds1 reads utime+stime of pid from /proc/<pid>/stat (clock ticks of 1/100 s).
func cpuSeconds1(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (u + st) / 100
}

func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}

func numCPU() int { return runtime.NumCPU() }

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// statements reads the counts of statements and round trips of p's database pools from its
// /metrics.
func (p *proc) statements(ctx context.Context) (statements, roundTrips float64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.adminAddr+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, 0, err
	}
	found := 0
	for l := range strings.SplitSeq(string(body), "\n") {
		name, v, _ := strings.Cut(l, " ")
		f, perr := strconv.ParseFloat(strings.TrimSpace(v), 64)
		switch {
		case perr != nil:
		case name == "listing_db_statements_total":
			statements, found = f, found+1
		case name == "listing_db_round_trips_total":
			roundTrips, found = f, found+1
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("/metrics has no listing_db_statements_total and listing_db_round_trips_total")
	}
	return statements, roundTrips, nil
}

// xacts reads the transactions committed and rolled back in database db so far.
func xacts(ctx context.Context, admin *pgx.Conn, db string) (float64, error) {
	var n float64
	err := admin.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = $1`, db).Scan(&n)
	return n, err
}

// redisCommands sums the commands the cluster's primaries processed so far (INFO stats).
func (b *bench) redisCommands(ctx context.Context) (float64, error) {
	var mu sync.Mutex
	var sum float64
	err := b.rdb.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "stats").Result()
		if err != nil {
			return err
		}
		for l := range strings.SplitSeq(info, "\r\n") {
			if v, ok := strings.CutPrefix(l, "total_commands_processed:"); ok {
				f, err := strconv.ParseFloat(v, 64)
				if err != nil {
					return err
				}
				mu.Lock()
				sum += f
				mu.Unlock()
			}
		}
		return nil
	})
	return sum, err
}
