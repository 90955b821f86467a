package idem_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/infra/idem"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// BenchmarkIdempotentWrite measures, in one run with 32 concurrent clients, the latency of a
// bus execution that inserts one operation: without the idempotency middleware (baseline),
// with it (first execution under a fresh key), and a replay of a completed key. Each client
// makes b.N requests per kind; the kinds alternate in rounds so that they share the machine's
// conditions. It prints p50/p99, the ratios (targets: p50 ≤ 1.3× of the baseline, issue
// 47; p99 ≤ 1.5×; replay p50 ≤ 0.5× of a first execution's) and the CPU a request of each
// kind, this process's and the database backends'.
//
//	go test -run '^$' -bench BenchmarkIdempotentWrite -benchtime 100x ./infra/idem
func BenchmarkIdempotentWrite(b *testing.B) {
	const rounds = 4
	clients := 32
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_CLIENTS")); err == nil && v > 0 {
		clients = v // for exploring; the reported figures use 32
	}
	db := pgtest.New(b)
	bb := &bundle{db: db, keys: []idem.Key{testKey("k1", 1)}, reg: prometheus.NewRegistry()}
	bb.ws, bb.user = seedWorkspace(b, db)
	_, withIdem := bb.newBus(b, bb.keys)
	plain := bus.New(postgres.TxMiddleware(db.App))
	ctx := context.Background()
	// IDEM_BENCH_ROWS=n makes the handler write n operations rows (default 1), to see the
	// overhead against a handler that does more than the minimum.
	rows := 1
	if v, err := strconv.Atoi(os.Getenv("IDEM_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	handler := bus.HandlerFunc[createOp, opResult](func(ctx context.Context, cmd createOp) (opResult, error) {
		var r opResult
		var err error
		for range rows {
			if r, err = insertOp(ctx, cmd); err != nil {
				return r, err
			}
		}
		return r, nil
	})

	perRound := max(b.N/rounds, 1)
	type sample struct{ base, first, replay []time.Duration }
	samples := make([]sample, clients)
	// cpu counts, per kind, the CPU time of this process and of the database's backends
	// while that kind ran, and how many requests it made (what the p50 ratio comes from:
	// 32 clients on a machine's cores queue for its CPU).
	type cpuUse struct {
		goCPU, pgCPU time.Duration
		n            int
	}
	cpu := map[string]*cpuUse{"base": {}, "first": {}, "replay": {}}

	runKind := func(kind string, round int) {
		g0, p0 := selfCPU(), backendsCPU(ctx, db)
		defer func() {
			c := cpu[kind]
			c.goCPU += selfCPU() - g0
			c.pgCPU += backendsCPU(ctx, db) - p0
			c.n += clients * perRound
		}()
		var wg sync.WaitGroup
		start := make(chan struct{})
		for c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s := &samples[c]
				<-start
				for i := range perRound {
					var err error
					t0 := time.Now()
					switch kind {
					case "base":
						_, err = bus.Execute(ctx, plain, handler, bus.Request[createOp]{
							Command: createOp{Resource: uuid.New()}, Actor: bus.Actor{WorkspaceID: bb.ws, UserID: bb.user}})
						s.base = append(s.base, time.Since(t0))
					case "first":
						_, err = bb.execOn(ctx, withIdem, reqWith(bb, benchKey(c, round, i), handler))
						s.first = append(s.first, time.Since(t0))
					case "replay":
						var r bus.Reply[opResult]
						r, err = bb.execOn(ctx, withIdem, reqWith(bb, benchKey(c, round, i), handler))
						if err == nil && !r.Replayed {
							err = fmt.Errorf("not a replay")
						}
						s.replay = append(s.replay, time.Since(t0))
					}
					if err != nil {
						b.Error(kind, err)
						return
					}
				}
			}()
		}
		close(start)
		wg.Wait()
	}

	// Warm every pooled connection's statement cache.
	for _, k := range []string{"base", "first", "replay"} {
		runKind(k, -1)
	}
	samples = make([]sample, clients)
	cpu = map[string]*cpuUse{"base": {}, "first": {}, "replay": {}}
	b.ResetTimer()
	for round := range rounds {
		order := []string{"base", "first"}
		if round%2 == 1 {
			order = []string{"first", "base"}
		}
		for _, k := range order {
			runKind(k, round)
		}
		runKind("replay", round)
	}
	b.StopTimer()

	var base, first, replay []time.Duration
	for _, s := range samples {
		base, first, replay = append(base, s.base...), append(first, s.first...), append(replay, s.replay...)
	}
	p := func(d []time.Duration, q float64) time.Duration {
		slices.Sort(d)
		if len(d) == 0 {
			return 0
		}
		return d[min(len(d)-1, int(q*float64(len(d))))]
	}
	bp50, bp99 := p(base, 0.50), p(base, 0.99)
	fp50, fp99 := p(first, 0.50), p(first, 0.99)
	rp50, rp99 := p(replay, 0.50), p(replay, 0.99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(bp50), "base-p50-ms")
	b.ReportMetric(ms(fp50), "idem-p50-ms")
	b.ReportMetric(ms(rp50), "replay-p50-ms")
	b.ReportMetric(ms(fp50)/ms(bp50), "p50-ratio")
	b.ReportMetric(ms(fp99)/ms(bp99), "p99-ratio")
	b.ReportMetric(ms(rp50)/ms(fp50), "replay/first-p50")
	fmt.Fprintf(os.Stdout, "\n%d clients, %d requests per kind, %d row(s) written by the handler\n", clients, len(base), rows)
	fmt.Fprintf(os.Stdout, "%-28s p50 %8.3f ms  p99 %8.3f ms\n", "baseline (no idempotency)", ms(bp50), ms(bp99))
	fmt.Fprintf(os.Stdout, "%-28s p50 %8.3f ms  p99 %8.3f ms\n", "idempotent first execution", ms(fp50), ms(fp99))
	fmt.Fprintf(os.Stdout, "%-28s p50 %8.3f ms  p99 %8.3f ms\n", "idempotent replay", ms(rp50), ms(rp99))
	for _, k := range []string{"base", "first", "replay"} {
		c := cpu[k]
		us := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(max(c.n, 1)) }
		fmt.Fprintf(os.Stdout, "%-28s CPU a request: Go %6.0f µs  PostgreSQL %6.0f µs\n", k, us(c.goCPU), us(c.pgCPU))
	}
	fmt.Fprintf(os.Stdout, "p50 ratio %.2f (target ≤ 1.3)  p99 ratio %.2f (target ≤ 1.5)  replay/first p50 %.2f (target ≤ 0.5)\n",
		ms(fp50)/ms(bp50), ms(fp99)/ms(bp99), ms(rp50)/ms(fp50))
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendsCPU is the CPU time of the PostgreSQL backends connected to db's database, read
// from /proc/<pid>/schedstat (0 for a server on another machine or a pid that cannot be read).
func backendsCPU(ctx context.Context, db *pgtest.DB) time.Duration {
	rows, err := db.Owner.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return 0
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0
	}
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) > 0 {
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			total += time.Duration(ns)
		}
	}
	return total
}

// benchKey is a deterministic key per client, round and request, so a replay finds it.
func benchKey(client, round, i int) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceOID, fmt.Appendf(nil, "bench/%d/%d/%d", client, round, i))
}

func reqWith(b *bundle, key uuid.UUID, h bus.Handler[createOp, opResult]) req {
	r := b.req(key, `{"title":"bench","price":12.5}`)
	r.handler = h
	return r
}
