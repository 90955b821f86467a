package main

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// usage is a snapshot of where CPU time and work went, to say what bounds a measurement:
// this process's CPU (the Go side: dispatcher, workers, clients), the CPU of the PostgreSQL
// backends serving the scratch database, Redis's CPU (the server is shared: other clients'
// work counts too), and the transactions and Redis commands done.
type usage struct {
	at        time.Time
	goCPU     time.Duration
	pgCPU     time.Duration
	redisCPU  time.Duration
	pgXacts   int64
	redisCmds int64
	// stmts and trips are the statements and round trips the counted pool sent (scratch.stmts).
	stmts, trips int64
	// outboxRows counts outbox_all_events (-1: not counted, see countOutbox).
	outboxRows int64
	// redisCalls counts Redis's calls per command (INFO commandstats; the commands a Lua
	// script runs count, as does the EVALSHA that runs it).
	redisCalls map[string]int64
}

// clockTick is USER_HZ, the unit of /proc/<pid>/stat's times (100 on Linux).
const clockTick = 100

func snapshot(ctx context.Context, db *scratch, rdb *redis.Client) usage {
	u := usage{at: time.Now(), outboxRows: -1}
	u.stmts, u.trips = db.stmts.counts()
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		u.goCPU = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if rows, err := db.Owner.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`); err == nil {
		for rows.Next() {
			var pid int
			if rows.Scan(&pid) == nil {
				u.pgCPU += procCPU(pid)
			}
		}
		rows.Close()
	}
	_ = db.Owner.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&u.pgXacts)
	if rdb != nil {
		if info, err := rdb.Info(ctx, "commandstats").Result(); err == nil {
			u.redisCalls = map[string]int64{}
			for l := range strings.SplitSeq(info, "\r\n") {
				// cmdstat_get:calls=1,usec=2,...
				name, rest, ok := strings.Cut(strings.TrimPrefix(l, "cmdstat_"), ":calls=")
				if !ok {
					continue
				}
				calls, _, _ := strings.Cut(rest, ",")
				u.redisCalls[name], _ = strconv.ParseInt(calls, 10, 64)
			}
		}
		if info, err := rdb.Info(ctx, "cpu", "stats").Result(); err == nil {
			for l := range strings.SplitSeq(info, "\r\n") {
				k, v, _ := strings.Cut(l, ":")
				switch k {
				case "used_cpu_user", "used_cpu_sys":
					f, _ := strconv.ParseFloat(v, 64)
					u.redisCPU += time.Duration(f * float64(time.Second))
				case "total_commands_processed":
					u.redisCmds, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
	}
	return u
}

// procCPU is the user + system CPU time of process pid (0 when it cannot be read).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / clockTick
}

// report prints what went where between before and after, per unit of work. The
// PostgreSQL backends' CPU is counted from before's backends and the ones opened since
// (their whole life).
func report(name string, before, after usage, n int, unit string) {
	el := after.at.Sub(before.at)
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.0f µs/%s (%.0f%% of a core)", float64(d.Microseconds())/float64(n), unit, 100*d.Seconds()/el.Seconds())
	}
	fmt.Printf("   %s: %d %ss in %s; CPU: Go %s, PostgreSQL %s, Redis %s; %.2f transactions/%s, %.1f Redis commands/%s\n",
		name, n, unit, el.Round(time.Millisecond), per(after.goCPU-before.goCPU), per(after.pgCPU-before.pgCPU),
		per(after.redisCPU-before.redisCPU), float64(after.pgXacts-before.pgXacts)/float64(n), unit,
		float64(after.redisCmds-before.redisCmds)/float64(n), unit)
	if after.redisCalls != nil && before.redisCalls != nil {
		type kv struct {
			k string
			v int64
		}
		var all []kv
		for k, v := range after.redisCalls {
			if d := v - before.redisCalls[k]; d > 0 {
				all = append(all, kv{k, d})
			}
		}
		slices.SortFunc(all, func(a, b kv) int { return int(b.v - a.v) })
		var parts []string
		for _, e := range all {
			if float64(e.v)/float64(n) < 0.05 {
				break
			}
			parts = append(parts, fmt.Sprintf("%s %.2f", e.k, float64(e.v)/float64(n)))
		}
		fmt.Printf("   %s: Redis commands/%s by command (INFO commandstats; other clients' count too): %s\n", name, unit, strings.Join(parts, ", "))
	}
	if trips := after.trips - before.trips; trips > 0 {
		fmt.Printf("   %s: %.2f statements/%s in %.2f round trips/%s (this process's pool, counted by a pgx tracer)",
			name, float64(after.stmts-before.stmts)/float64(n), unit, float64(trips)/float64(n), unit)
		if before.outboxRows >= 0 && after.outboxRows >= 0 {
			fmt.Printf("; %.2f outbox rows/%s written", float64(after.outboxRows-before.outboxRows)/float64(n), unit)
		}
		fmt.Println()
	}
}

// countOutbox sets u.outboxRows to the number of rows of outbox_all_events (as the owner:
// every workspace's).
func countOutbox(ctx context.Context, db *scratch, u usage) usage {
	if err := db.Owner.QueryRow(ctx, `SELECT count(*) FROM outbox_all_events`).Scan(&u.outboxRows); err != nil {
		u.outboxRows = -1
	}
	return u
}

// waits samples, every 50 ms until stopped (a sample costs the server about 1 ms), what the active PostgreSQL backends of the
// scratch database are doing (pg_stat_activity: on CPU, or the wait event), as the
// database's side of a profile: CPU time says how busy the backends were, this says what
// the rest of their time went to (WAL flushes, locks, the client).
type waits struct {
	mu      sync.Mutex
	counts  map[string]int
	samples int
	stop    context.CancelFunc
	done    chan struct{}
}

func sampleWaits(ctx context.Context, db *scratch) *waits {
	ctx, cancel := context.WithCancel(ctx)
	w := &waits{counts: map[string]int{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := db.Owner.Query(ctx, `SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || wait_event, 'CPU')
				  ELSE state END
				FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend'`)
			if err != nil {
				continue
			}
			w.mu.Lock()
			for rows.Next() {
				var s string
				if rows.Scan(&s) == nil {
					w.counts[s]++
				}
			}
			w.samples++
			w.mu.Unlock()
			rows.Close()
		}
	}()
	return w
}

// summary stops the sampling and returns the busiest states: the average number of
// backends in each per sample, highest first, idle backends left out.
func (w *waits) summary() string {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	type kv struct {
		k string
		v int
	}
	var all []kv
	for k, v := range w.counts {
		if k != "idle" {
			all = append(all, kv{k, v})
		}
	}
	slices.SortFunc(all, func(a, b kv) int { return b.v - a.v })
	var parts []string
	for i, e := range all {
		if i == 6 || w.samples == 0 {
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.1f", e.k, float64(e.v)/float64(w.samples)))
	}
	return fmt.Sprintf("backends per sample (%d samples): %s", w.samples, strings.Join(parts, ", "))
}
