package outbox

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Child processes: the test binary re-executed with OUTBOX_CHILD set.
const childEnv = "OUTBOX_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
		os.Exit(m.Run())
	case "commit":
		childCommit()
	case "dispatch":
		childDispatch()
	default:
		fmt.Fprintln(os.Stderr, "unknown child mode")
		os.Exit(2)
	}
}

func childFail(err error) {
	fmt.Fprintln(os.Stderr, "child:", err)
	os.Exit(3)
}

// childCommit commits OUTBOX_N events in workspace OUTBOX_WS the way an API process does,
// says "committed", and waits to be killed.
func childCommit() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: os.Getenv("OUTBOX_DB_URL")})
	if err != nil {
		childFail(err)
	}
	ws := uuid.MustParse(os.Getenv("OUTBOX_WS"))
	n, _ := strconv.Atoi(os.Getenv("OUTBOX_N"))
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	if err != nil {
		childFail(err)
	}
	err = postgres.InTx(ctx, pool, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		evs := make([]domain.Event, n)
		for i := range evs {
			evs[i] = testHappened{ID: uuid.Must(uuid.NewV7()), ThingID: strconv.Itoa(i), Version: 1}
		}
		return pub.Publish(ctx, evs...)
	})
	if err != nil {
		childFail(err)
	}
	fmt.Println("committed")
	select {} // killed here: after the commit, before any delivery
}

// hangAfterPublish publishes for real, then says "published" and blocks forever: the
// process is killed between the publish and the mark.
type hangAfterPublish struct{ next message.Publisher }

func (h hangAfterPublish) Publish(topic string, msgs ...*message.Message) error {
	if err := h.next.Publish(topic, msgs...); err != nil {
		return err
	}
	fmt.Println("published")
	select {}
}

func (h hangAfterPublish) Close() error { return nil }

func childDispatch() {
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, postgres.PoolConfig{URL: os.Getenv("OUTBOX_DB_URL")})
	if err != nil {
		childFail(err)
	}
	opt, err := redis.ParseURL(redisURL())
	if err != nil {
		childFail(err)
	}
	rdb := redis.NewClient(opt)
	bp, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: os.Getenv("OUTBOX_PREFIX")}}, nil)
	if err != nil {
		childFail(err)
	}
	cfg := fastConfig()
	cfg.Lease = 3 * time.Second
	cfg.PublishTimeout = 2 * time.Second
	d, err := NewDispatcher(cfg, pool, PublisherMap{testQueue: hangAfterPublish{bp}}, nil, nil)
	if err != nil {
		childFail(err)
	}
	if err := d.Run(ctx); err != nil {
		childFail(err)
	}
}

// startChild runs the test binary in mode, waits for want on its stdout, and returns it.
func startChild(t *testing.T, mode, want string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(env, childEnv+"="+mode, "REDIS_URL="+redisURL())...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			require.True(t, ok, "child %s exited before saying %q", mode, want)
			if l == want {
				go func() {
					for range lines {
					}
				}()
				return cmd
			}
		case <-timeout:
			t.Fatalf("child %s did not say %q", mode, want)
		}
	}
}

func kill(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
}

func allIDs(t *testing.T, db *pgtest.DB) []uuid.UUID {
	rows, err := db.Owner.Query(context.Background(), `SELECT id FROM outbox_all_events`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	require.NoError(t, err)
	return ids
}

func TestCrashAfterCommitBeforeDelivery(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	q := newBullQueue(t, newRedis(t))
	const n = 50
	child := startChild(t, "commit", "committed",
		"OUTBOX_DB_URL="+db.AppURL, "OUTBOX_WS="+ws.String(), "OUTBOX_N="+strconv.Itoa(n))
	kill(t, child)
	require.Equal(t, map[string]int{StatusPending: n}, statusCounts(t, db), "committed, nothing delivered")
	require.Zero(t, q.adds(t))

	startDispatcher(t, db, fastConfig(), q.router())
	waitFor(t, 20*time.Second, "delivered", func() bool { return statusCounts(t, db)[StatusDispatched] == n })
	ids := allIDs(t, db)
	require.Equal(t, n, q.jobs(t, ids), "one BullMQ job per event")
	require.Equal(t, n, q.adds(t), "each event added once")
}

func TestDispatcherKilledAfterPublishBeforeMark(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	q := newBullQueue(t, newRedis(t))
	const n = 40
	ids := publishEvents(t, db, ws, n)

	child := startChild(t, "dispatch", "published", "OUTBOX_DB_URL="+db.AppURL, "OUTBOX_PREFIX="+q.prefix)
	kill(t, child)
	require.Equal(t, n, q.jobs(t, ids), "the killed dispatcher published")
	require.Equal(t, n, q.adds(t))
	require.Equal(t, map[string]int{StatusDispatching: n}, statusCounts(t, db), "but never marked")

	// A new dispatcher takes the events again only after the lease (3s) expired.
	start := time.Now()
	startDispatcher(t, db, fastConfig(), q.router())
	waitFor(t, 30*time.Second, "redelivered", func() bool { return statusCounts(t, db)[StatusDispatched] == n })
	var lockedUntilPassed bool
	require.NoError(t, db.Owner.QueryRow(context.Background(),
		`SELECT bool_and(dispatched_at > created_at + interval '2 seconds') FROM outbox_dispatched`).Scan(&lockedUntilPassed))
	require.True(t, lockedUntilPassed, "not before the lease expired (took %s)", time.Since(start))
	require.Equal(t, 2*n, q.adds(t), "published again under the same ids")
	require.Equal(t, n, q.jobs(t, ids), "BullMQ holds one job per id")
	var attempts int
	require.NoError(t, db.Owner.QueryRow(context.Background(), `SELECT max(attempt_count) FROM outbox_dispatched`).Scan(&attempts))
	require.Equal(t, 1, attempts, "the expired lease counted as an attempt")
}

// proxy is a TCP proxy to Redis that can be stopped (closing every connection) and started
// again on the same address.
type proxy struct {
	t      *testing.T
	target string
	addr   string
	mu     sync.Mutex
	ln     net.Listener
	conns  []net.Conn
}

func newProxy(t *testing.T, target string) *proxy {
	p := &proxy{t: t, target: target}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
}

func (p *proxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) start() {
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(p.t, err)
	p.serve(ln)
}

func TestRedisUnavailableBacksOffAndDrains(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	real := newRedis(t)
	q := newBullQueue(t, real)

	opt, err := redis.ParseURL(redisURL())
	require.NoError(t, err)
	px := newProxy(t, opt.Addr)
	px.stop() // Redis "down" from the start
	popt := *opt
	popt.Addr = px.addr
	popt.MaxRetries = -1
	popt.DialTimeout = 200 * time.Millisecond
	rdb := redis.NewClient(&popt)
	t.Cleanup(func() { _ = rdb.Close() })
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: bullmq.Config{Client: rdb, Prefix: q.prefix}}, nil)
	require.NoError(t, err)

	const n = 200
	ids := publishEvents(t, db, ws, n)
	cfg := fastConfig()
	cfg.BackoffBase = 100 * time.Millisecond
	cfg.BackoffMax = 800 * time.Millisecond
	cfg.MaxAttempts = 1000
	cfg.PublishTimeout = time.Second
	startDispatcher(t, db, cfg, PublisherMap{testQueue: pub})

	ctx := context.Background()
	attemptsAt := func() (minA, maxA int, lastErr string) {
		require.NoError(t, db.Owner.QueryRow(ctx, `SELECT min(attempt_count), max(attempt_count), coalesce(max(last_error), '') FROM outbox_events`).
			Scan(&minA, &maxA, &lastErr))
		return
	}
	waitFor(t, 20*time.Second, "three failed attempts each", func() bool { a, _, _ := attemptsAt(); return a >= 3 })
	c := statusCounts(t, db)
	require.Zero(t, c[StatusDispatched])
	require.Zero(t, c[StatusDeadLetter])
	_, _, lastErr := attemptsAt()
	require.NotEmpty(t, lastErr)
	// Growing backoff: the gaps between attempts of one event grow (0.05–0.1s, 0.1–0.2s, …).
	var gap float64
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT extract(epoch FROM max(next_attempt_at - now())) FROM outbox_events WHERE status = 'pending'`).Scan(&gap))
	time.Sleep(1500 * time.Millisecond)
	a1, a2, _ := attemptsAt()
	require.Less(t, a2, 20, "backoff slows the retries down (min %d max %d)", a1, a2)
	require.Zero(t, q.adds(t))

	px.start() // Redis is back
	waitFor(t, 20*time.Second, "drained", func() bool { return statusCounts(t, db)[StatusDispatched] == n })
	require.Equal(t, n, q.jobs(t, ids), "nothing lost")
	require.Equal(t, n, q.adds(t), "nothing twice")
	_ = strings.TrimSpace
}

func TestTwoDispatchersTenThousandEvents(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	wss := make([]uuid.UUID, 10)
	for i := range wss {
		wss[i] = createWorkspace(t, db)
	}
	ids := bulkInsert(t, db, wss, 1000)
	require.Len(t, ids, 10000)
	q := newBullQueue(t, newRedis(t))
	cfg := fastConfig()
	cfg.BatchSize = 200
	cfg.Lease = time.Minute
	d1, _ := startDispatcher(t, db, cfg, q.router())
	d2, _ := startDispatcher(t, db, cfg, q.router())
	waitFor(t, 90*time.Second, "all dispatched", func() bool { return statusCounts(t, db)[StatusDispatched] == 10000 })
	require.Equal(t, 10000, q.jobs(t, ids), "every event published")
	require.Equal(t, 10000, q.adds(t), "none published twice")
	p1 := int(testutilValue(d1))
	p2 := int(testutilValue(d2))
	t.Logf("dispatcher 1 published %d, dispatcher 2 published %d", p1, p2)
	require.Equal(t, 10000, p1+p2)
	require.Positive(t, p1)
	require.Positive(t, p2)
}
