// Command idembench measures what the idempotency middleware costs on a real endpoint, through
// the assembled service, in one run (issue 3, section Benchmark):
//
//	go run ./internal/idembench
//	go run ./internal/idembench -clients 32 -rounds 8 -n 25 -cpuprofile /tmp/idem.pprof
//
// The endpoint is POST /v1/workspaces/{ws}/stores, the first adopter of idempotency: in one RLS
// transaction it writes the store, its sealed credentials, an operation, a verification task and
// two outbox rows. Two assemblies serve it over HTTP from one process, on one scratch database,
// each built by the wire injector listing.InitializeAPI as cmd/app builds it (each with its own
// pool of 40 app_user connections):
//
//   - "idempotent": the service as assembled, the bus logging/metrics → RLS transaction →
//     idempotency;
//   - "baseline": the same assembly whose bus (the one its routes were built with) is then
//     rebuilt in place without the idempotency middleware and its opening statement: the
//     service's chain (bus.Observe, postgres.TxMiddleware on the assembly's pool,
//     commandstream.Guard, commandstream.Expiry) less the guard's. Requests still carry an
//     Idempotency-Key and go through the same HTTP handler; only the record is not kept
//     (the final check counts one record per first execution, none per baseline request).
//
// Each of -clients concurrent clients (default 32) uses a workspace of its own. After a
// warm-up, rounds alternate baseline / first execution (order swapped every other round), then
// replay: each client re-sends the requests it completed in that round's first executions, same
// key and body, and every reply must be 201 with Idempotent-Replayed: true. Every shop_id is
// unique, so no request meets STORE_ALREADY_EXISTS. The program prints p50/p95/p99 per kind and
// the ratios the issues target (p50 ≤ 1.15× since issue 13, p99 ≤ 1.5× of the baseline, replay p50 ≤ 0.5×
// of a first execution's), then checks in the database that exactly one store exists per
// executed request and one idempotency record per first execution.
//
// Reading the figures: since sql/012 no commit of this endpoint waits for PostgreSQL's
// cluster-wide NOTIFY lock (the wake-up of the dispatchers happens after the commit), so
// latencies track the server's commit rate and the CPU the two assemblies share. Other work
// on the machine skews the figures: the load average is printed before and after; run it
// more than once. A default run takes about three minutes on a busy two-core machine.
// -statements counts the SQL statements (round trips) each kind of request sends, on the wire
// (see statementProxy: the injector's pool takes no tracer); -per-round
// prints each round's p50 to show drift.
//
// It exits non-zero only on an error (a failed request, a wrong count), never because a target
// is missed. The scratch database (idembench_<random>) is created on the server named by
// TEST_DATABASE_URL (a superuser; default postgres://root@127.0.0.1:5432/postgres), migrated
// with postgres.Migrate, used by the service as app_user, and dropped at the end (-keep keeps
// it, e.g. for EXPLAIN ANALYZE). Redis is not needed: no worker runs, and the client the
// assembly makes is never used by this endpoint.
package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	listing "github.com/listingkit/listing"
	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/commandstream"
	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres"
)

// defaultAdminURL is pgtest.DefaultAdminURL (pgtest is for tests: it needs a testing.TB).
const defaultAdminURL = "postgres://root@127.0.0.1:5432/postgres?sslmode=disable"

type options struct {
	clients, rounds, n, warmup int
	cpuProfile                 string
	keep, perRound             bool
	statements                 bool
}

func main() {
	var o options
	flag.IntVar(&o.clients, "clients", 32, "concurrent clients (the issue's figures use 32)")
	flag.IntVar(&o.rounds, "rounds", 8, "measured rounds; each runs every kind")
	flag.IntVar(&o.n, "n", 25, "requests per client, per kind, per round")
	flag.IntVar(&o.warmup, "warmup", 5, "warm-up requests per client and kind (not measured)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the scratch database (its name is printed)")
	flag.BoolVar(&o.perRound, "per-round", false, "also print each round's p50 per kind (drift)")
	flag.BoolVar(&o.statements, "statements", false, "count the SQL statements (round trips) per request of each kind, counted by a proxy in front of PostgreSQL")
	flag.Parse()
	if o.clients < 1 || o.rounds < 1 || o.n < 1 || o.warmup < 0 {
		fmt.Fprintln(os.Stderr, "idembench: -clients, -rounds and -n must be positive, -warmup not negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "idembench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) (err error) {
	admin := os.Getenv("TEST_DATABASE_URL")
	if admin == "" {
		admin = defaultAdminURL
	}
	db, err := createDatabase(ctx, admin)
	if err != nil {
		return err
	}
	defer func() {
		// The servers closed their connections first (deferred later), so every backend
		// flushed its statistics.
		if herr := printHOT(db.ownerURL); herr != nil && err == nil {
			err = herr
		}
		if o.keep {
			fmt.Printf("kept database %s\n", db.name)
			return
		}
		if derr := db.drop(); derr != nil && err == nil {
			err = derr
		}
	}()

	cfg, err := config.Load()
	if err != nil {
		return err
	}
	cfg.DatabaseURL = db.appURL
	// Large enough that no client waits for a connection (servicetest uses 40 too).
	cfg.DatabaseMaxConns = 40
	var stmts *statementProxy
	if o.statements {
		if stmts, err = newStatementProxy(db.appURL); err != nil {
			return err
		}
		defer stmts.close()
		cfg.DatabaseURL = stmts.url
	}
	cfg.AuthRatePerMinute = 100000
	cfg.AccessTokenTTL = 6 * time.Hour
	storageDir, err := os.MkdirTemp("", "idembench-storage-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(storageDir)
	cfg.StorageDir = storageDir
	// Logs are formatted as in production (JSON, info) and thrown away: both assemblies pay
	// the same per-request logging.
	log := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo}))

	idemSrv, err := serve(ctx, cfg, log, true)
	if err != nil {
		return err
	}
	defer idemSrv.close()
	baseSrv, err := serve(ctx, cfg, log, false)
	if err != nil {
		return err
	}
	defer baseSrv.close()

	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns: 4 * o.clients, MaxIdleConnsPerHost: 2 * o.clients, IdleConnTimeout: time.Minute,
	}, Timeout: time.Minute}
	defer hc.CloseIdleConnections()

	clients := make([]*client, o.clients)
	for c := range clients {
		cl, err := register(ctx, hc, idemSrv.url, c)
		if err != nil {
			return err
		}
		clients[c] = cl
	}
	b := &bench{o: o, hc: hc, clients: clients, base: baseSrv.url, idem: idemSrv.url}

	load0 := loadavg()
	fmt.Printf("idembench: POST /v1/workspaces/{ws}/stores, %d clients, %d rounds × %d requests per client and kind (+%d warm-up); GOMAXPROCS=%d; load average before: %s\n",
		o.clients, o.rounds, o.n, o.warmup, runtime.GOMAXPROCS(0), load0)

	// Warm-up: connections (HTTP and PostgreSQL), prepared statements, Go's and PostgreSQL's caches.
	if o.warmup > 0 {
		for _, k := range []kind{kindBase, kindFirst, kindReplay} {
			if _, err := b.runKind(ctx, k, -1, o.warmup); err != nil {
				return fmt.Errorf("warm-up %s: %w", k, err)
			}
		}
	}

	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return err
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}

	all := map[kind][]time.Duration{}
	elapsed := map[kind]time.Duration{}
	statements := map[kind]int64{}
	start := time.Now()
	for round := range o.rounds {
		order := []kind{kindBase, kindFirst}
		if round%2 == 1 {
			order = []kind{kindFirst, kindBase}
		}
		order = append(order, kindReplay)
		var line []string
		for _, k := range order {
			t0, s0 := time.Now(), stmts.count()
			d, err := b.runKind(ctx, k, round, o.n)
			statements[k] += stmts.count() - s0
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", round, k, err)
			}
			elapsed[k] += time.Since(t0)
			all[k] = append(all[k], d...)
			line = append(line, fmt.Sprintf("%s p50 %s", k, ms(percentile(d, 0.50))))
		}
		if o.perRound {
			fmt.Printf("  round %d: %s\n", round, strings.Join(line, ", "))
		}
	}
	total := time.Since(start)
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}

	fmt.Printf("measured in %s; load average after: %s\n", total.Round(time.Millisecond), loadavg())
	stats := map[kind][3]time.Duration{}
	for _, k := range []kind{kindBase, kindFirst, kindReplay} {
		d := all[k]
		s := [3]time.Duration{percentile(d, 0.50), percentile(d, 0.95), percentile(d, 0.99)}
		stats[k] = s
		fmt.Printf("  %-34s n=%-6d p50 %8s  p95 %8s  p99 %8s  (%.0f req/s)", k.label(), len(d),
			ms(s[0]), ms(s[1]), ms(s[2]), float64(len(d))/elapsed[k].Seconds())
		if o.statements {
			fmt.Printf("  %.2f statements/request", float64(statements[k])/float64(len(d)))
		}
		fmt.Println()
	}
	p50 := ratio(stats[kindFirst][0], stats[kindBase][0])
	p99 := ratio(stats[kindFirst][2], stats[kindBase][2])
	rep := ratio(stats[kindReplay][0], stats[kindFirst][0])
	fmt.Printf("  first/baseline p50 %.2f× (target ≤ 1.15) %s\n", p50, verdict(p50 <= 1.15))
	fmt.Printf("  first/baseline p99 %.2f× (target ≤ 1.50) %s\n", p99, verdict(p99 <= 1.5))
	fmt.Printf("  replay/first   p50 %.2f× (target ≤ 0.50) %s\n", rep, verdict(rep <= 0.5))

	return b.check(ctx, db.ownerURL)
}

type kind string

const (
	kindBase   kind = "baseline"
	kindFirst  kind = "first"
	kindReplay kind = "replay"
)

func (k kind) label() string {
	switch k {
	case kindBase:
		return "baseline (no idempotency middleware)"
	case kindFirst:
		return "idempotent, first execution"
	default:
		return "idempotent, replay"
	}
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// client is one concurrent client: an account with a workspace of its own.
type client struct {
	token, storesPath string
	// completed are the idempotent requests of the current round that completed: the replays
	// re-send them.
	completed []sent
	// executed counts requests that ran the handler (baseline and first executions).
	executed, firsts int
}

type sent struct {
	key  string
	body []byte
	resp []byte
}

type bench struct {
	o          options
	hc         *http.Client
	clients    []*client
	base, idem string
}

// runKind runs n requests of kind k on every client at once and returns their latencies.
func (b *bench) runKind(ctx context.Context, k kind, round, n int) ([]time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	out := make([][]time.Duration, len(b.clients))
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for c, cl := range b.clients {
		wg.Go(func() {
			<-gate
			d, err := b.clientRun(ctx, cl, c, k, round, n)
			if err != nil {
				cancel(fmt.Errorf("client %d: %w", c, err))
			}
			out[c] = d
		})
	}
	close(gate)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}
	var all []time.Duration
	for _, d := range out {
		all = append(all, d...)
	}
	return all, nil
}

func (b *bench) clientRun(ctx context.Context, cl *client, c int, k kind, round, n int) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	switch k {
	case kindBase, kindFirst:
		target := b.base
		if k == kindFirst {
			target = b.idem
			cl.completed = cl.completed[:0]
		}
		for i := range n {
			key := uuid.NewString()
			body := storeBody(fmt.Sprintf("%s-%d-%d-%d-%s", k, c, round, i, key[:8]))
			t0 := time.Now()
			status, hdr, resp, err := b.post(ctx, target+cl.storesPath, cl.token, key, body)
			d = append(d, time.Since(t0))
			if err != nil {
				return nil, err
			}
			if status != http.StatusCreated || hdr.Get("Idempotent-Replayed") != "" {
				return nil, fmt.Errorf("%s: status %d, replayed %q: %s", k, status, hdr.Get("Idempotent-Replayed"), resp)
			}
			cl.executed++
			if k == kindFirst {
				cl.firsts++
				cl.completed = append(cl.completed, sent{key: key, body: body, resp: resp})
			}
		}
	case kindReplay:
		if len(cl.completed) < n {
			return nil, fmt.Errorf("replay: only %d completed requests to re-send", len(cl.completed))
		}
		for _, s := range cl.completed[:n] {
			t0 := time.Now()
			status, hdr, resp, err := b.post(ctx, b.idem+cl.storesPath, cl.token, s.key, s.body)
			d = append(d, time.Since(t0))
			if err != nil {
				return nil, err
			}
			if status != http.StatusCreated || hdr.Get("Idempotent-Replayed") != "true" || !bytes.Equal(resp, s.resp) {
				return nil, fmt.Errorf("replay: status %d, replayed %q, same body %v: %s", status,
					hdr.Get("Idempotent-Replayed"), bytes.Equal(resp, s.resp), resp)
			}
		}
	}
	return d, nil
}

func storeBody(shop string) []byte {
	return fmt.Appendf(nil, `{"platform":"sandbox","shop_id":%q,"name":"Bench shop","credentials":{"api_key":"sk_bench_%s"}}`,
		shop, strings.ReplaceAll(shop, "-", "_"))
}

func (b *bench) post(ctx context.Context, u, token, key string, body []byte) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := b.hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, raw, nil
}

// check counts, as the owner (no RLS), that every executed request made exactly one store and
// every first execution exactly one completed idempotency record: replays ran no handler.
func (b *bench) check(ctx context.Context, ownerURL string) error {
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var executed, firsts int
	for _, c := range b.clients {
		executed += c.executed
		firsts += c.firsts
	}
	var stores, records, completed int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM stores),
		(SELECT count(*) FROM idempotency_requests),
		(SELECT count(*) FROM idempotency_requests WHERE status = 'completed')`).Scan(&stores, &records, &completed); err != nil {
		return fmt.Errorf("check: %w", err)
	}
	if stores != executed || records != firsts || completed != firsts {
		return fmt.Errorf("check: %d stores for %d executed requests, %d idempotency records (%d completed) for %d first executions",
			stores, executed, records, completed, firsts)
	}
	fmt.Printf("checked: %d stores for %d executed requests, %d completed idempotency records for %d first executions\n",
		stores, executed, completed, firsts)
	return nil
}

// server is one assembly served over HTTP on a loopback port.
type server struct {
	url   string
	srv   *http.Server
	close func()
}

// serve assembles the API with the wire injector listing.InitializeAPI, as cmd/app does, and
// serves it on a loopback port; withIdem false then rebuilds the assembly's bus without the
// idempotency middleware (the baseline).
func serve(ctx context.Context, cfg config.Config, log *slog.Logger, withIdem bool) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.PublicBaseURL = "http://" + ln.Addr().String()
	api, cleanup, err := listing.InitializeAPI(ctx, cfg, listing.Options{FastPasswordHashing: true}, listing.NewRegistry(), log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	if !withIdem {
		// The assembly's registry already holds the bus metrics: the baseline's go to a
		// registry of their own, at the same cost.
		m, err := bus.NewMetrics(prometheus.NewRegistry())
		if err != nil {
			cleanup()
			ln.Close()
			return nil, err
		}
		// In place: the routes hold the bus they were built with (httpapi.Runs), so a
		// new *bus.Bus in Application would change nothing they run.
		*api.App.Bus = *bus.New(bus.Observe(log, m), postgres.TxMiddleware(api.Pool), commandstream.Guard(), commandstream.Expiry())
	}
	hs := &http.Server{Handler: api.Server, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return &server{url: cfg.PublicBaseURL, srv: hs, close: func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = hs.Shutdown(sctx)
		cleanup()
	}}, nil
}

// register creates the account of client c (with its workspace) on the service.
func register(ctx context.Context, hc *http.Client, base string, c int) (*client, error) {
	body := fmt.Appendf(nil, `{"email":"bench-%d-%s@example.com","password":"correct horse battery staple","workspace_name":"Bench %d"}`,
		c, randomHex(4), c)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/auth/register", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("register: status %d: %s", resp.StatusCode, raw)
	}
	var m struct {
		Workspace struct {
			ID string `json:"id"`
		} `json:"workspace"`
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("register: %w", err)
	}
	return &client{token: m.AccessToken, storesPath: "/v1/workspaces/" + m.Workspace.ID + "/stores"}, nil
}

// scratch is the benchmark's own database.
type scratch struct {
	admin, name, ownerURL, appURL string
}

func createDatabase(ctx context.Context, admin string) (*scratch, error) {
	name := "idembench_" + randomHex(6)
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect as the administrator: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	db := &scratch{admin: admin, name: name}
	if db.ownerURL, err = postgres.WithDatabase(admin, name, ""); err == nil {
		db.appURL, err = postgres.WithDatabase(admin, name, "app_user")
	}
	if err == nil {
		_, err = postgres.Migrate(ctx, db.ownerURL, false)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("migrate: %w", err), db.drop())
	}
	return db, nil
}

// printHOT prints how many of the updates of idempotency_requests (the completions) were HOT,
// i.e. wrote no index entry, from the statistics of the scratch database.
func printHOT(ownerURL string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ownerURL)
	if err != nil {
		return fmt.Errorf("HOT statistics: %w", err)
	}
	defer conn.Close(ctx)
	var upd, hot int64
	for range 20 { // the statistics of a closed backend reach the view within a moment
		if err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'idempotency_requests'`).
			Scan(&upd, &hot); err != nil {
			return fmt.Errorf("HOT statistics: %w", err)
		}
		if upd > 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	ratio := 0.0
	if upd > 0 {
		ratio = float64(hot) / float64(upd)
	}
	fmt.Printf("idempotency_requests updates: %d, HOT: %d (%.1f%%)\n", upd, hot, 100*ratio)
	return nil
}

func (db *scratch) drop() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database: %w", err)
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// loadavg is the machine's load as uptime reports it: other work on the machine skews figures.
func loadavg() string {
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		if len(f) >= 3 {
			return strings.Join(f[:3], " ")
		}
	}
	if out, err := exec.Command("uptime").Output(); err == nil {
		return strings.TrimSpace(string(out))
	}
	return "unknown"
}
