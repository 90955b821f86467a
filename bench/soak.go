package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// soakOptions shape `make soak`: events committed at an average of rate a second, with a
// burst of ten times that rate in the first 3 s of every minute, dispatched to BullMQ and
// completed by a worker, for minutes; a REPEATABLE READ transaction held open in the
// service's database from holdFrom to holdTo (minutes). Completed jobs and job ids stay in
// Redis as the service's JOB_KEEP_COMPLETED (keep) and JOB_RETENTION (retention) say.
type soakOptions struct {
	minutes, holdFrom, holdTo int
	retention                 time.Duration
	keep                      int
	rate                      float64
	// svg is where the soak's chart goes (empty: nowhere).
	svg string
}

// soak runs the soak and prints one line a minute: claim p50/p99 (the dispatcher's
// histogram, interpolated within its buckets), outbox_events' heap and index sizes and dead
// tuples, the log's size, WAL bytes per event committed, and the Redis memory of the soak's
// keys (MEMORY USAGE summed). Two WAL columns: the cluster's (the LSN's advance, which other
// databases of a shared cluster add to) and the soak database's own (ownWAL: the records
// pg_walinspect attributes to it), with a breakdown by record type and relation at the end.
func soak(ctx context.Context, o options, so soakOptions) error {
	if so.rate <= 0 {
		return fmt.Errorf("soak: -rate must be positive")
	}
	db, err := newScratch(ctx, o.adminURL, 30)
	if err != nil {
		return err
	}
	defer db.drop()
	wss, err := db.workspaces(ctx, 100)
	if err != nil {
		return err
	}
	rdb, err := newRedis(ctx, o.redisURL, 64)
	if err != nil {
		return err
	}
	defer rdb.Close()
	prefix := "soak-" + randomHex(4)
	defer deletePrefix(rdb, prefix)
	keep := bullmq.KeepJobs{Count: so.keep}
	if so.keep <= 0 {
		keep = bullmq.KeepJobs{Remove: true}
	}
	bcfg := bullmq.Config{Client: rdb, Prefix: prefix, RemoveOnComplete: keep, DedupWindow: so.retention}
	bp, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bcfg}, nil)
	if err != nil {
		return err
	}
	defer bp.Close()
	reg := prometheus.NewRegistry()
	d, err := outbox.NewDispatcher(outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true}, db.App,
		outbox.PublisherMap{benchQueue: bp}, nil, reg)
	if err != nil {
		return err
	}
	var jobsDone atomic.Int64
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: bcfg, Queue: benchQueue, Concurrency: 20},
		func(context.Context, *bullmq.Job) (any, error) { jobsDone.Add(1); return nil, nil })
	if err != nil {
		return err
	}
	pub, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: benchRoutes})
	if err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The Go side's CPU by role: a CPU profile whose samples carry the goroutine's role label
	// (pprof.Do; goroutines started under it inherit it), summed with go tool pprof -tags.
	prof, err := os.CreateTemp("", "soak-*.pprof")
	if err != nil {
		return err
	}
	defer os.Remove(prof.Name())
	if err := pprof.StartCPUProfile(prof); err != nil {
		return err
	}
	profiling := true
	stopProfile := func() {
		if profiling {
			pprof.StopCPUProfile()
			_ = prof.Close()
			profiling = false
		}
	}
	defer stopProfile()
	role := func(name string, fn func()) func() {
		return func() { pprof.Do(rctx, pprof.Labels("role", name), func(context.Context) { fn() }) }
	}
	var bg sync.WaitGroup
	bg.Go(role("dispatcher", func() { _ = d.Run(rctx) }))
	bg.Go(role("worker", func() { _ = w.Run(rctx) }))
	defer bg.Wait()
	defer cancel()

	// Committers: 24 goroutines take one event each from work (the API's requests); a burst
	// waits in work's buffer rather than being dropped.
	var committed, failed atomic.Int64
	work := make(chan uuid.UUID, 1<<16)
	for range 24 {
		bg.Go(role("committer", func() {
			for ws := range work {
				id := uuid.Must(uuid.NewV7())
				err := postgres.InTx(rctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
					if _, err := tx.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id)
						VALUES ($1, $2, 'soak', 'thing', $1)`, id, ws); err != nil {
						return err
					}
					return pub.Publish(ctx, benchHappened{ID: id, ThingID: id.String()})
				})
				if err != nil {
					failed.Add(1)
					continue
				}
				committed.Add(1)
			}
		}))
	}
	// The load: every 10 ms, the events of that slice of the second.
	bg.Go(func() {
		defer close(work)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		start := time.Now()
		carry := 0.0
		for i := 0; ; i++ {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
			}
			rate := so.rate * (60 - 3*10) / 57 // outside bursts, so that a minute averages so.rate
			if int(time.Since(start).Seconds())%60 < 3 {
				rate = 10 * so.rate
			}
			carry += rate / 100
			for ; carry >= 1; carry-- {
				select {
				case work <- wss[i%len(wss)]:
				default: // the committers are behind: the event is dropped, and counted
					failed.Add(1)
				}
			}
		}
	})

	// Autovacuum stands in: a cluster with autovacuum off (a shared test cluster) gets the
	// VACUUM that outbox_events' own settings (sql/018: after 1,000 dead rows) would start.
	var vacuums atomic.Int64
	var autovacuum string
	if err := db.Owner.QueryRow(ctx, `SHOW autovacuum`).Scan(&autovacuum); err != nil {
		return err
	}
	if autovacuum == "off" {
		bg.Go(func() {
			for rctx.Err() == nil {
				var dead int64
				_ = db.Owner.QueryRow(rctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events'`).Scan(&dead)
				if dead > 1000 {
					if _, err := db.Owner.Exec(rctx, `VACUUM outbox_events`); err == nil {
						vacuums.Add(1)
					}
				}
				select {
				case <-rctx.Done():
				case <-time.After(5 * time.Second):
				}
			}
		})
	}
	wi, err := newWALInspector(ctx, db)
	defer wi.close()
	if err != nil {
		fmt.Printf("soak: no WAL of the soak's own database (%v): the own WAL column stays empty\n", err)
	}
	fmt.Printf("soak: autovacuum %s%s\n", autovacuum, map[bool]string{true: ": the soak runs VACUUM outbox_events after 1,000 dead rows, as the table's autovacuum settings would", false: ""}[autovacuum == "off"])
	fmt.Printf("soak: %d min, %.0f events/s on average, bursts of %.0f/s for 3 s a minute, 100 workspaces; REPEATABLE READ held from minute %d to %d; JOB_KEEP_COMPLETED %d, JOB_RETENTION %s; load average %s\n",
		so.minutes, so.rate, 10*so.rate, so.holdFrom, so.holdTo, so.keep, so.retention, loadavg())
	fmt.Printf("%-4s %-5s %8s %8s %8s %8s %10s %10s %10s %10s %12s %10s %8s %6s %10s %8s %8s %8s %7s %6s %s\n", "min", "held", "events", "jobs", "claim50", "claim99",
		"live heap", "live idx", "dead tup", "log", "WAL B/event", "own B/ev", "own FPI", "ckpts", "redis MB", "Go us/ev", "PG us/ev", "Rds us/ev", "vacuums", "load1", "failed")

	var held pgx.Tx
	defer func() {
		if held != nil {
			_ = held.Rollback(context.WithoutCancel(ctx))
		}
	}()
	prevHist := claimBuckets(reg)
	// The claim's cumulative buckets at the start, at the hold's start and end, for the
	// pooled quantiles printed at the end (each phase's claims together, not per minute).
	phases := [][]bucket{prevHist, nil, nil}
	prevEvents := int64(0)
	prevWAL := walLSN(ctx, db)
	prevFlush := flushLSN(ctx, db)
	if prevFlush == "" {
		wi = nil
	}
	var ownTotal, ownHeld, evTotal, evHeld int64
	prevCk := checkpoints(ctx, db)
	// CPU per event: this process (committers, dispatcher, worker), the scratch database's
	// backends, Redis (a shared server: other clients' work counts too); Redis memory of the
	// soak's keys, from the end of the first minute (the queue's fixed keys settled).
	startUse := snapshot(ctx, db, rdb)
	prevUse := startUse
	var redisStart, jobsStart int64
	var plotted []soakMinute // the chart's points: what each minute's line prints
	for m := 1; m <= so.minutes; m++ {
		if m-1 == so.holdFrom {
			phases[1] = prevHist
			if held, err = db.Owner.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead}); err != nil {
				return err
			}
			if _, err := held.Exec(ctx, `SELECT count(*) FROM workspaces`); err != nil {
				return err
			}
		}
		if m-1 == so.holdTo {
			phases[2] = prevHist
		}
		if m-1 == so.holdTo && held != nil {
			_ = held.Rollback(ctx)
			held = nil
		}
		// The minute, with the database's own WAL read every 5 s (see walInspector.read).
		minute := newWALSample()
		gap := wi == nil
		end := time.Now().Add(time.Minute)
		for time.Now().Before(end) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(min(5*time.Second, time.Until(end))):
			}
			if wi == nil {
				continue
			}
			flush := flushLSN(ctx, db)
			if smp, err := wi.read(ctx, prevFlush, flush); err != nil {
				if !gap {
					fmt.Printf("soak: own WAL of minute %d not counted: %v\n", m, err)
				}
				gap = true
			} else {
				minute.merge(smp)
			}
			prevFlush = flush
		}
		hist := claimBuckets(reg)
		delta := make([]bucket, len(hist))
		for i := range hist {
			delta[i] = bucket{le: hist[i].le, n: hist[i].n - prevHist[i].n}
		}
		prevHist = hist
		ev := committed.Load()
		wal := walLSN(ctx, db)
		perEvent := 0.0
		if ev > prevEvents {
			perEvent = float64(wal-prevWAL) / float64(ev-prevEvents)
		}
		own, ownFPI := "-", "-"
		ck := checkpoints(ctx, db)
		if !gap && ev > prevEvents {
			own = fmt.Sprintf("%.0f", float64(minute.total)/float64(ev-prevEvents))
			ownFPI = fmt.Sprintf("%.0f", float64(minute.fpi)/float64(ev-prevEvents))
			ownTotal += minute.total
			evTotal += ev - prevEvents
			if held != nil {
				ownHeld += minute.total
				evHeld += ev - prevEvents
			} else {
				wi.outside.merge(minute)
			}
		}
		var heap, idx, logSize, dead int64
		_ = db.Owner.QueryRow(ctx, `SELECT pg_relation_size('outbox_events'), pg_indexes_size('outbox_events'),
			(SELECT coalesce(sum(pg_total_relation_size(inhrelid)), 0)::bigint FROM pg_inherits WHERE inhparent = 'outbox_dispatched'::regclass),
			(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'outbox_events')`).Scan(&heap, &idx, &logSize, &dead)
		heldNow := "no"
		if held != nil {
			heldNow = "yes"
		}
		use := snapshot(ctx, db, rdb)
		rb := redisBytes(ctx, rdb, prefix)
		jd := jobsDone.Load()
		if m == 1 {
			redisStart, jobsStart = rb, jd
		}
		perEv := func(d time.Duration) float64 {
			if ev == prevEvents {
				return 0
			}
			return float64(d.Microseconds()) / float64(ev-prevEvents)
		}
		fmt.Printf("%-4d %-5s %8d %8d %8s %8s %9.1fM %9.1fM %10d %9.1fM %12.0f %10s %8s %6d %10.1f %8.0f %8.0f %8.0f %7d %6s %d\n", m, heldNow, ev-prevEvents,
			jd, msf(quantile(delta, .5)), msf(quantile(delta, .99)), mb(heap), mb(idx), dead, mb(logSize), perEvent, own, ownFPI, ck-prevCk,
			mb(rb), perEv(use.goCPU-prevUse.goCPU), perEv(use.pgCPU-prevUse.pgCPU), perEv(use.redisCPU-prevUse.redisCPU),
			vacuums.Load(), strings.Fields(loadavg())[0], failed.Load())
		plotted = append(plotted, soakMinute{minute: m, held: held != nil, claim99: quantile(delta, .99) * 1000, walB: perEvent, redisMB: mb(rb)})
		prevEvents, prevWAL, prevCk, prevUse = ev, wal, ck, use
	}
	printClaimPhases(phases, claimBuckets(reg))
	endUse := snapshot(ctx, db, rdb)
	stopProfile()
	evAll := committed.Load()
	cpuLine := func(name string, a, b usage, events int64) {
		if events <= 0 {
			return
		}
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(events) }
		fmt.Printf("soak: CPU per event %s (%d events): Go %.0f us, PostgreSQL %.0f us, Redis %.0f us (a shared server: other clients count too)\n",
			name, events, per(b.goCPU-a.goCPU), per(b.pgCPU-a.pgCPU), per(b.redisCPU-a.redisCPU))
	}
	cpuLine("over the run", startUse, endUse, evAll)
	if tags, err := exec.Command("go", "tool", "pprof", "-tags", prof.Name()).Output(); err == nil {
		fmt.Printf("soak: the Go process's CPU by role (go tool pprof -tags over the run; divide by %d events):\n%s", evAll, tags)
	} else {
		fmt.Printf("soak: no CPU by role: %v\n", err)
	}
	var backends int
	_ = db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()`).Scan(&backends)
	rbEnd, jdEnd := redisBytes(ctx, rdb, prefix), jobsDone.Load()
	events := rdb.MemoryUsage(ctx, prefix+":"+benchQueue+":events", 0).Val()
	if jdEnd > jobsStart {
		fmt.Printf("soak: Redis: %.1f MB of the soak's keys after minute 1, %.1f MB at the end, %d jobs finished between: %.1f MB per 100,000 jobs (the queue's own events stream, capped at 10,000 entries: %.1f MB)\n",
			mb(redisStart), mb(rbEnd), jdEnd-jobsStart, float64(rbEnd-redisStart)/float64(jdEnd-jobsStart)*100000/1e6, mb(events))
	}
	fmt.Printf("soak: %d events committed, %d jobs finished, %d failed; PostgreSQL backends of the soak's database at the end: %d\n", evAll, jdEnd, failed.Load(), backends)
	if wi != nil && evTotal > 0 {
		fmt.Printf("soak: own WAL: %d B over %d events, %.0f B/event", ownTotal, evTotal, float64(ownTotal)/float64(evTotal))
		if evTotal > evHeld {
			fmt.Printf("; outside the held transaction %.0f B/event", float64(ownTotal-ownHeld)/float64(evTotal-evHeld))
		}
		if evHeld > 0 {
			fmt.Printf("; while it was held %.0f B/event", float64(ownHeld)/float64(evHeld))
		}
		fmt.Println()
		wi.print(ctx, evTotal-evHeld)
	}
	fmt.Printf("soak: load average after: %s\n", loadavg())
	if so.svg != "" && len(plotted) > 0 {
		title := fmt.Sprintf("make soak, %.0f events/s, %s", so.rate, time.Now().UTC().Format("2006-01-02 15:04 UTC"))
		if err := writeFile(so.svg, soakSVG(plotted, title)); err != nil {
			return err
		}
		fmt.Printf("soak: chart → %s\n", so.svg)
	}
	return nil
}

// printClaimPhases prints the claim's p50/p99 over all the claims of each phase: before the
// held transaction, while it is held, after it (marks: the cumulative buckets at the start,
// the hold's start and its end; a phase the run did not reach is left out).
func printClaimPhases(marks [][]bucket, end []bucket) {
	bounds := append(slices.Clone(marks), end)
	names := []string{"before the hold", "during it", "after it"}
	for i, name := range names {
		from, to := bounds[i], bounds[i+1]
		if from == nil || to == nil {
			continue
		}
		d := make([]bucket, len(to))
		for j := range to {
			d[j] = bucket{le: to[j].le, n: to[j].n - from[j].n}
		}
		fmt.Printf("soak: claims %s: %d, p50 %s, p99 %s\n", name, d[len(d)-1].n, msf(quantile(d, .5)), msf(quantile(d, .99)))
	}
}

type bucket struct {
	le float64
	n  uint64
}

// claimBuckets reads the cumulative buckets of listing_outbox_claim_duration_seconds.
func claimBuckets(reg *prometheus.Registry) []bucket {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "listing_outbox_claim_duration_seconds" {
			continue
		}
		var out []bucket
		for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
			out = append(out, bucket{le: b.GetUpperBound(), n: b.GetCumulativeCount()})
		}
		out = append(out, bucket{le: math.Inf(1), n: mf.GetMetric()[0].GetHistogram().GetSampleCount()})
		return out
	}
	return nil
}

// quantile interpolates q within cumulative bucket counts (seconds).
func quantile(bs []bucket, q float64) float64 {
	if len(bs) == 0 || bs[len(bs)-1].n == 0 {
		return math.NaN()
	}
	rank := q * float64(bs[len(bs)-1].n)
	lo, prev := 0.0, uint64(0)
	for _, b := range bs {
		if float64(b.n) >= rank {
			if math.IsInf(b.le, 1) {
				return lo
			}
			in := b.n - prev
			if in == 0 {
				return b.le
			}
			return lo + (b.le-lo)*(rank-float64(prev))/float64(in)
		}
		lo, prev = b.le, b.n
	}
	return lo
}

func msf(s float64) string {
	if math.IsNaN(s) {
		return "-"
	}
	return fmt.Sprintf("%.1fms", s*1000)
}

func mb(b int64) float64 { return float64(b) / 1e6 }

func walLSN(ctx context.Context, db *scratch) int64 {
	var n int64
	_ = db.Owner.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&n)
	return n
}

// redisBytes sums MEMORY USAGE over the keys of prefix.
func redisBytes(ctx context.Context, rdb *redis.Client, prefix string) int64 {
	var total int64
	iter := rdb.Scan(ctx, 0, prefix+":*", 5000).Iterator()
	var keys []string
	flush := func() {
		p := rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(keys))
		for i, k := range keys {
			cmds[i] = p.MemoryUsage(ctx, k, 0)
		}
		_, _ = p.Exec(ctx)
		for _, c := range cmds {
			total += c.Val()
		}
		keys = keys[:0]
	}
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
		if len(keys) == 1000 {
			flush()
		}
	}
	if len(keys) > 0 {
		flush()
	}
	return total
}
