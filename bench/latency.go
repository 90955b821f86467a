package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// benchLatency measures commit → job visible at o.rate events/s for o.secs s with the
// committer (this process) and the dispatcher (a child process) apart, as serve and dispatch
// run in production: the service's wake-up (Redis PUBLISH after the commit, coalesced) vs
// watermill-sql's subscriber polling every 10 ms + forwarder, also in a child process.
func benchLatency(ctx context.Context, o options, t *table) error {
	ours, err := latencyOurs(ctx, o)
	if err != nil {
		return err
	}
	wm, err := latencyWatermill(ctx, o)
	if err != nil {
		return err
	}
	for _, side := range []struct {
		name string
		lat  []latency
	}{{"ours", ours}, {"watermill-sql", wm}} {
		fmt.Printf("   %s: %s\n", side.name, spread(side.lat))
	}
	for _, q := range []struct {
		name   string
		q      float64
		target time.Duration
	}{{"p50", 0.50, 0}, {"p99", 0.99, 20 * time.Millisecond}} {
		a, b := percentile(durations(ours), q.q), percentile(durations(wm), q.q)
		l := line{measure: fmt.Sprintf("commit → job %s at %d/s, separate processes", q.name, o.rate), ours: ms(a),
			peer: "watermill-sql 10 ms poll", peerFig: ms(b), ratio: float64(a) / float64(b)}
		if q.target > 0 {
			l.target, l.met = "≤ "+ms(q.target), a <= q.target
		} else {
			l.target, l.info = "reference", true
		}
		t.add(l)
	}
	return nil
}

// latency is one event's commit → job visible, and when its commit returned.
type latency struct {
	committed time.Time
	d         time.Duration
}

func durations(l []latency) []time.Duration {
	out := make([]time.Duration, len(l))
	for i, x := range l {
		out[i] = x.d
	}
	return out
}

// spread describes a latency distribution's tail: upper percentiles, the maximum, and in how
// many 100 ms windows of commits an event took over 20 ms (a few windows: a stall; many
// spread over the run: saturation).
func spread(l []latency) string {
	d := durations(l)
	var first time.Time
	for _, x := range l {
		if first.IsZero() || x.committed.Before(first) {
			first = x.committed
		}
	}
	slow := map[int64]bool{}
	windows := map[int64]bool{}
	for _, x := range l {
		w := int64(x.committed.Sub(first) / (100 * time.Millisecond))
		windows[w] = true
		if x.d > 20*time.Millisecond {
			slow[w] = true
		}
	}
	return fmt.Sprintf("p90 %s, p99 %s, p99.9 %s, max %s; events over 20 ms in %d of %d 100-ms windows",
		ms(percentile(d, 0.90)), ms(percentile(d, 0.99)), ms(percentile(d, 0.999)), ms(percentile(d, 1)), len(slow), len(windows))
}

func latencyOurs(ctx context.Context, o options) ([]latency, error) {
	db, err := newScratch(ctx, o.adminURL, 20)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	rdb, err := newRedis(ctx, o.redisURL, 10)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	wss, err := db.workspaces(ctx, 100)
	if err != nil {
		return nil, err
	}
	prefix, channel := "bench-"+randomHex(4), "bench-wakeup-"+randomHex(4)
	defer deletePrefix(rdb, prefix)
	child, err := startChild(ctx, "dispatch", db.appURL, prefix, channel, o.redisURL)
	if err != nil {
		return nil, err
	}
	defer child.kill()
	wake, err := outbox.NewWakeup(outbox.WakeupConfig{Redis: rdb, Channel: channel})
	if err != nil {
		return nil, err
	}
	defer wake.Close()
	pub, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: benchRoutes, Signal: wake})
	if err != nil {
		return nil, err
	}
	if o.console > 0 {
		stop, err := watchConsole(ctx, o, db, rdb, prefix)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	before := child.usage(ctx, db, rdb)
	commits, all, err := steadyLoad(ctx, o.rate, o.secs, func(ctx context.Context, id uuid.UUID) error {
		ws := wss[rand.IntN(len(wss))]
		return postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
			return pub.Publish(ctx, benchHappened{ID: id, ThingID: id.String()})
		})
	})
	if err != nil {
		return nil, err
	}
	report("ours (committer + dispatcher)", before, child.usage(ctx, db, rdb), len(all), "event")
	return child.latencies(commits, len(all))
}

func latencyWatermill(ctx context.Context, o options) ([]latency, error) {
	db, err := newEmptyScratch(ctx, o.adminURL)
	if err != nil {
		return nil, err
	}
	defer db.drop()
	rdb, err := newRedis(ctx, o.redisURL, 10)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	prefix := "bench-" + randomHex(4)
	defer deletePrefix(rdb, prefix)
	child, err := startChild(ctx, "wmsql", db.ownerURL, prefix, "", o.redisURL)
	if err != nil {
		return nil, err
	}
	defer child.kill()
	before := child.usage(ctx, db, rdb)
	commits, all, err := steadyLoad(ctx, o.rate, o.secs, func(ctx context.Context, id uuid.UUID) error {
		tx, err := db.Owner.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		sp, err := wsql.NewPublisher(wsql.TxFromPgx(tx), wsql.PublisherConfig{SchemaAdapter: wsql.DefaultPostgreSQLSchema{}}, nil)
		if err != nil {
			return err
		}
		fp := forwarder.NewPublisher(sp, forwarder.PublisherConfig{ForwarderTopic: wmTopic})
		b, _ := json.Marshal(benchHappened{ID: id, ThingID: id.String()})
		m := message.NewMessage(id.String(), b)
		m.Metadata.Set(outbox.MetadataEventType, "bench.happened")
		m.SetContext(ctx)
		if err := fp.Publish(benchQueue, m); err != nil {
			return err
		}
		return tx.Commit(ctx)
	})
	if err != nil {
		return nil, err
	}
	report("watermill-sql (committer + forwarder)", before, child.usage(ctx, db, rdb), len(all), "msg")
	return child.latencies(commits, len(all))
}

// steadyLoad commits one event every 1/rate s for 1 + secs s (16 committers, so that a slow
// commit does not shift the schedule) and returns the commit-return time of each event of the
// last secs s: the first second warms both sides up (connections opened, statements
// prepared) and is not measured; its events are still waited for.
func steadyLoad(ctx context.Context, rate, secs int, commit func(ctx context.Context, id uuid.UUID) error) (measured, all map[string]time.Time, err error) {
	warm := rate
	total := warm + rate*secs
	interval := time.Second / time.Duration(rate)
	start := time.Now()
	var next atomic.Int64
	var mu sync.Mutex
	out := make(map[string]time.Time, total)
	var firstErr error
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(total) {
					return
				}
				time.Sleep(time.Until(start.Add(time.Duration(i) * interval)))
				id := uuid.Must(uuid.NewV7())
				err := commit(ctx, id)
				now := time.Now()
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				out[id.String()] = now
				mu.Unlock()
				if err != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	measured = make(map[string]time.Time, len(out))
	for id, at := range out {
		if !at.Before(start.Add(time.Second)) {
			measured[id] = at
		}
	}
	return measured, out, firstErr
}

// child is a child process of the latency benchmark: it prints "ready", then "seen N" as it
// publishes, and on the end of its standard input a "result" line with the publish time of
// every message.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	seen  atomic.Int64
	lines chan string
}

func startChild(ctx context.Context, role, db, prefix, channel, redisURL string) (*child, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, "-role", role, "-role-db", db, "-role-prefix", prefix, "-role-channel", channel, "-redis", redisURL)
	cmd.Stderr = os.Stderr
	c := &child{cmd: cmd, lines: make(chan string, 16)}
	if c.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<30)
		for sc.Scan() {
			s := sc.Text()
			switch {
			case s == "ready":
				close(ready)
			case strings.HasPrefix(s, "seen "):
				n, _ := strconv.ParseInt(strings.TrimPrefix(s, "seen "), 10, 64)
				c.seen.Store(n)
			default:
				c.lines <- s
			}
		}
		close(c.lines)
	}()
	select {
	case <-ready:
		return c, nil
	case <-time.After(30 * time.Second):
		c.kill()
		return nil, fmt.Errorf("%s child not ready", role)
	}
}

// usage is snapshot with the child's CPU added to this process's (the Go side of both).
func (c *child) usage(ctx context.Context, db *scratch, rdb *redis.Client) usage {
	u := snapshot(ctx, db, rdb)
	u.goCPU += procCPU(c.cmd.Process.Pid)
	return u
}

func (c *child) kill() { _ = c.cmd.Process.Kill(); _ = c.cmd.Wait() }

// latencies waits up to 2 minutes for the child to have published all events, ends it,
// and returns commit → publish of each of commits. An event the child never published is an
// error.
func (c *child) latencies(commits map[string]time.Time, all int) ([]latency, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for c.seen.Load() < int64(all) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	_ = c.stdin.Close()
	var res map[string]int64
	for s := range c.lines {
		if r, ok := strings.CutPrefix(s, "result "); ok {
			if err := json.Unmarshal([]byte(r), &res); err != nil {
				return nil, err
			}
		}
	}
	_ = c.cmd.Wait()
	out := make([]latency, 0, len(commits))
	missing := 0
	for id, at := range commits {
		ns, ok := res[id]
		if !ok {
			missing++
			continue
		}
		out = append(out, latency{committed: at, d: max(0, time.Unix(0, ns).Sub(at))})
	}
	if missing > 0 {
		return nil, fmt.Errorf("%d of %d events not published within 2 minutes", missing, len(commits))
	}
	return out, nil
}

type roleFlags struct{ name, db, prefix, channel string }

// runRole is the child process: a dispatcher (dispatch) or a watermill-sql subscriber +
// forwarder (wmsql) publishing to BullMQ under r.prefix.
func runRole(ctx context.Context, r roleFlags, redisURL string) error {
	rdb, err := newRedis(ctx, redisURL, 20)
	if err != nil {
		return err
	}
	defer rdb.Close()
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: r.prefix}}, nil)
	if err != nil {
		return err
	}
	defer pub.Close()
	c := newCounting(pub, 1<<62, true)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wait func()
	switch r.name {
	case "dispatch":
		pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: r.db, MaxConns: 20}) // as the service opens its own
		if err != nil {
			return err
		}
		defer pool.Close()
		d, err := outbox.NewDispatcher(outbox.DispatcherConfig{MetricsInterval: -1, DisableListen: true, WakeRedis: rdb, WakeChannel: r.channel},
			pool, outbox.PublisherMap{benchQueue: c}, nil, nil)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { _ = d.Run(ctx); close(done) }()
		wait = func() { <-done }
		time.Sleep(500 * time.Millisecond) // subscribed
	case "wmsql":
		pool, err := pgxpool.New(ctx, r.db)
		if err != nil {
			return err
		}
		defer pool.Close()
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(pool), wsql.SubscriberConfig{
			SchemaAdapter:    wsql.DefaultPostgreSQLSchema{},
			OffsetsAdapter:   wsql.DefaultPostgreSQLOffsetsAdapter{},
			InitializeSchema: true,
			PollInterval:     10 * time.Millisecond,
		}, watermill.NopLogger{})
		if err != nil {
			return err
		}
		if err := sub.SubscribeInitialize(wmTopic); err != nil {
			return err
		}
		fwd, err := forwarder.NewForwarder(sub, c, watermill.NopLogger{}, forwarder.Config{ForwarderTopic: wmTopic})
		if err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { _ = fwd.Run(ctx); close(done) }()
		<-fwd.Running()
		wait = func() { _ = fwd.Close(); <-done }
		time.Sleep(500 * time.Millisecond)
	default:
		return fmt.Errorf("unknown role %q", r.name)
	}
	fmt.Println("ready")
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); close(eof) }()
	var last int64
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
loop:
	for {
		select {
		case <-eof:
			break loop
		case <-ctx.Done():
			break loop
		case <-tick.C:
			if n := c.count(); n != last {
				last = n
				fmt.Printf("seen %d\n", n)
			}
		}
	}
	cancel()
	wait()
	c.mu.Lock()
	res := make(map[string]int64, len(c.seen))
	for id, at := range c.seen {
		res[id] = at.UnixNano()
	}
	c.mu.Unlock()
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Printf("result %s\n", b)
	return nil
}
