// Command bench is the benchmark suite of issue 13: every figure of the service measured
// beside a peer in the same run, on the same PostgreSQL and Redis, printed as one table of
// ratios with the target each one must meet.
//
//	make bench                     # from the repository root: cd bench && go run . -root ..
//	go run . -root .. -only write,latency -n 20000
//
// Lines (each: figure, peer figure, ratio, target, met/MISSED):
//
//   - write path: commits/s of an event-emitting command transaction (an operation row and
//     an outbox event, postgres.InTx + outbox.EventPublisher) with the wake-up the service
//     uses (after the commit: a coalesced Redis PUBLISH) vs the same transaction with no
//     wake-up at all; 8 and 32 clients, short measurements alternating over -write-rounds
//     rounds (the load of a shared machine drifts: it must fall on both alike). For
//     reference, the NOTIFY trigger that sql/012 dropped, measured the same way.
//   - drain: -n committed outbox events → BullMQ jobs by the Dispatcher, from 1 and from
//     10,000 workspaces, vs Node.js BullMQ addBulk of -n jobs, and vs watermill-sql's
//     PostgreSQL subscriber + watermill's forwarder draining -n committed messages into the
//     same BullMQ publisher.
//   - commit → job visible at -rate events/s for -secs s, the committer and the dispatcher
//     in separate processes (this binary re-executed with -role): p50 and p99, vs
//     watermill-sql's subscriber polling every 10 ms + forwarder, also in its own process.
//   - end to end: -n commands (operation, store verification task, outbox row) committed,
//     then the dispatcher and the Go workers (infra/jobs over BullMQ, a worker.Flow whose
//     call does nothing but whose begin and record transactions run as in production, fair
//     share at its default: FAIR_SHARE_SLOTS 4 × the workers) until every task succeeded, vs
//     River: InsertManyTx of -n jobs, then no-op workers to completion. Both start from a
//     committed backlog; the same worker concurrency.
//   - Go BullMQ publisher and worker vs Node.js BullMQ (infra/bullmq/cmd/bullmqbench).
//   - idempotency: first execution vs the same request without the middleware, over HTTP
//     (internal/idembench) and at the bus with a one-row handler (infra/idem
//     BenchmarkIdempotentWrite).
//
// Every scratch database (bench_<random>) is created on TEST_DATABASE_URL (a superuser;
// default postgres://root@127.0.0.1:5432/postgres), migrated, and dropped at the end; Redis
// keys live under a random prefix and are deleted. The load average is printed before and
// after: the figures of a busy machine are not comparable with a quiet one's.
package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/listingkit/listing/infra/outbox"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

type options struct {
	root      string
	only      map[string]bool
	n         int
	rate      int
	secs      int
	writeSecs time.Duration
	rounds    int
	workers   int
	redisURL  string
	adminURL  string
	cpuprof   string
	memprof   string
	// svg is where the table's chart goes (empty: nowhere).
	svg string
	// console, when positive, keeps the operator console's overview open on our side of the
	// latency and end-to-end sections, drawn every console (watchConsole).
	console time.Duration
	// fair sizes the fairness section.
	fair fairOptions
}

// on reports whether section runs: every one but fairness (minutes of its own: -only
// fairness) when -only is not given.
func (o options) on(section string) bool {
	return (len(o.only) == 0 && section != "fairness") || o.only[section]
}

var sections = []string{"write", "drain", "latency", "e2e", "bullmq", "idem", "fairness"}

func main() {
	var role roleFlags
	flag.StringVar(&role.name, "role", "", "internal: run as the child process of the latency benchmark (dispatch | wmsql)")
	flag.StringVar(&role.db, "role-db", "", "internal: the child's database URL")
	flag.StringVar(&role.prefix, "role-prefix", "", "internal: the child's BullMQ prefix")
	flag.StringVar(&role.channel, "role-channel", "", "internal: the child's wake-up channel")
	var o options
	var only string
	flag.StringVar(&o.root, "root", "..", "the service repository (for the Node.js harness, bullmqbench and idembench)")
	flag.StringVar(&only, "only", "", "comma-separated sections to run: "+strings.Join(sections, ","))
	flag.IntVar(&o.n, "n", 100000, "events / jobs / commands per drain and end-to-end measurement")
	flag.IntVar(&o.rate, "rate", 1000, "events per second of the latency benchmark; with -soak, the soak's average (350 when not given; bursts of ten times it for 3 s a minute)")
	flag.IntVar(&o.secs, "secs", 10, "seconds of the latency benchmark")
	flag.DurationVar(&o.writeSecs, "write-time", 2*time.Second, "duration of one write-path measurement")
	flag.IntVar(&o.rounds, "write-rounds", 6, "write-path rounds (each measures every configuration once, in rotating order)")
	flag.IntVar(&o.workers, "workers", 50, "worker concurrency of the end-to-end benchmark (ours and River)")
	flag.IntVar(&o.fair.backlog, "fair-backlog", 50000, "fairness: workspace N's tasks queued at once")
	flag.IntVar(&o.fair.secs, "fair-secs", 60, "fairness: seconds workspace Q publishes one task a second")
	flag.IntVar(&o.fair.workspaces, "fair-workspaces", 1000, "fairness: workspaces of the many-workspaces drain")
	flag.IntVar(&o.fair.per, "fair-per", 50, "fairness: tasks per workspace of the many-workspaces drain")
	flag.BoolVar(&o.fair.alone, "fair-alone", false, "fairness: only N alone, fair share on against off")
	flag.BoolVar(&o.fair.progress, "fair-progress", false, "fairness: print N's jobs done every 5 s")
	flag.IntVar(&o.fair.factor, "fair-alone-factor", outbox.DefaultAloneFactor, "fairness: FairShare.AloneFactor (1: a lane never takes more than its slots)")
	flag.StringVar(&o.redisURL, "redis", envOr("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL")
	flag.StringVar(&o.adminURL, "admin", envOr("TEST_DATABASE_URL", "postgres://root@127.0.0.1:5432/postgres"), "PostgreSQL superuser URL")
	flag.StringVar(&o.cpuprof, "cpuprofile", "", "write a CPU profile of this process (the Go side of every section) to this file")
	flag.DurationVar(&o.console, "console", 0, "keep the console's overview open on our side of the latency and end-to-end sections, its sampler running and the page drawn this often (0: no console)")
	flag.StringVar(&o.memprof, "memprofile", "", "write an allocation profile of this process (every section) to this file at the end")
	var so soakOptions
	runSoak := flag.Bool("soak", false, "run the soak instead of the benchmark sections (make soak)")
	flag.IntVar(&so.minutes, "soak-minutes", 30, "soak: minutes of load")
	flag.IntVar(&so.holdFrom, "soak-hold-from", 10, "soak: minute at which a REPEATABLE READ transaction opens")
	flag.IntVar(&so.holdTo, "soak-hold-to", 15, "soak: minute at which it ends")
	flag.DurationVar(&so.retention, "soak-retention", 90*time.Minute, "soak: JOB_RETENTION (how long a job's id keeps deduplicating)")
	flag.IntVar(&so.keep, "soak-keep-completed", 1000, "soak: JOB_KEEP_COMPLETED (completed jobs kept in Redis)")
	flag.StringVar(&o.svg, "svg", "auto", "write the table as an SVG chart here (auto: -root's docs/img/bench.svg when every section runs, none with -only; empty: none)")
	flag.StringVar(&so.svg, "soak-svg", "", "soak: write its chart (claim p99, WAL per event, Redis memory per minute, the hold shaded) here (default: -root's docs/img/soak.svg)")
	benchPlot := flag.String("bench-plot", "", "draw the chart of the last table in this file (make bench's stdout, or its table copied into a document) at -svg, then exit")
	plotTitle := flag.String("plot-title", "", "the title of a chart -bench-plot or -soak-plot draws (default: the file's name)")
	soakPlot := flag.String("soak-plot", "", "draw the chart of a soak from its printed output (a file holding make soak's stdout) at -soak-svg, then exit")
	flag.Parse()
	o.root, _ = filepath.Abs(o.root)
	if so.svg == "" {
		so.svg = filepath.Join(o.root, "docs", "img", "soak.svg")
	}
	so.rate = 350
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "rate" {
			so.rate = float64(o.rate)
		}
	})

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	switch {
	case role.name != "":
		err = runRole(ctx, role, o.redisURL)
	case *benchPlot != "":
		if o.svg == "auto" || o.svg == "" {
			o.svg = filepath.Join(o.root, "docs", "img", "bench.svg")
		}
		err = plotBench(*benchPlot, o.svg, *plotTitle)
	case *soakPlot != "":
		err = plotSoak(*soakPlot, so.svg, *plotTitle)
	case *runSoak:
		err = soak(ctx, o, so)
	default:
		o.only = map[string]bool{}
		for s := range strings.SplitSeq(only, ",") {
			if s = strings.TrimSpace(s); s != "" {
				if !slices.Contains(sections, s) {
					err = fmt.Errorf("unknown section %q (sections: %s)", s, strings.Join(sections, ","))
				}
				o.only[s] = true
			}
		}
		if o.svg == "auto" {
			o.svg = ""
			if len(o.only) == 0 {
				o.svg = filepath.Join(o.root, "docs", "img", "bench.svg")
			}
		}
		if err == nil {
			err = run(ctx, o)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.cpuprof != "" {
		f, err := os.Create(o.cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if o.memprof != "" {
		defer func() {
			if f, err := os.Create(o.memprof); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	start := time.Now()
	fmt.Printf("bench: n=%d rate=%d/s for %ds, workers %d; load average before: %s\n", o.n, o.rate, o.secs, o.workers, loadavg())
	var t table
	type section struct {
		name string
		fn   func(context.Context, options, *table) error
	}
	for _, s := range []section{{"write", benchWrite}, {"drain", benchDrain}, {"latency", benchLatency},
		{"e2e", benchE2E}, {"bullmq", benchBullMQ}, {"idem", benchIdem}, {"fairness", benchFairness}} {
		if !o.on(s.name) {
			continue
		}
		fmt.Printf("-- %s (load %s)\n", s.name, loadavg())
		if err := s.fn(ctx, o, &t); err != nil {
			if ctx.Err() != nil {
				return err
			}
			// The other sections still run: a failed one is a line of the table.
			fmt.Printf("   %s failed: %v\n", s.name, err)
			t.failed = append(t.failed, fmt.Sprintf("%s: %v", s.name, err))
		}
	}
	fmt.Printf("\nbench done in %s; load average after: %s\n\n", time.Since(start).Round(time.Second), loadavg())
	t.print(os.Stdout)
	if o.svg != "" && len(t.lines) > 0 {
		title := fmt.Sprintf("make bench, %s (load average after: %s)", time.Now().UTC().Format("2006-01-02 15:04 UTC"), loadavg())
		if err := writeFile(o.svg, benchSVG(&t, title)); err != nil {
			return err
		}
		fmt.Printf("bench: chart → %s\n", o.svg)
	}
	if len(t.failed) > 0 {
		return fmt.Errorf("%d section(s) failed", len(t.failed))
	}
	return nil
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}
