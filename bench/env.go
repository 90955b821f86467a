package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
)

// benchQueue is the destination of benchHappened events.
const benchQueue = "bench"

// benchHappened is the event of the write-path, drain and latency benchmarks.
type benchHappened struct {
	ID      uuid.UUID `json:"id"`
	ThingID string    `json:"thing_id"`
}

func (e benchHappened) EventType() string     { return "bench.happened" }
func (e benchHappened) AggregateType() string { return "thing" }
func (e benchHappened) AggregateID() string   { return e.ThingID }
func (e benchHappened) EventID() uuid.UUID    { return e.ID }

var benchRoutes = outbox.Routes{"bench.happened": benchQueue}

// scratch is a migrated database of its own.
type scratch struct {
	admin, name      string
	ownerURL, appURL string
	Owner, App       *pgxpool.Pool
	// stmts counts the statements the App pool sends (for River's database: the pool its
	// client runs on); nil when nothing counts them.
	stmts *stmtCounter
}

// newScratch creates and migrates a database, with pools as its owner and as app_user.
func newScratch(ctx context.Context, admin string, appConns int32) (*scratch, error) {
	db := &scratch{admin: admin, name: "bench_" + randomHex(6)}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, fmt.Errorf("connect as the administrator: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db.name}.Sanitize()); err != nil {
		return nil, fmt.Errorf("create database: %w", err)
	}
	if db.ownerURL, err = withDatabase(admin, db.name, ""); err == nil {
		db.appURL, err = withDatabase(admin, db.name, "app_user")
	}
	if err == nil {
		_, err = postgres.Migrate(ctx, db.ownerURL, false)
	}
	if err == nil {
		db.Owner, err = pgxpool.New(ctx, db.ownerURL)
	}
	if err == nil {
		db.stmts = &stmtCounter{}
		db.App, err = postgres.Connect(ctx, postgres.PoolConfig{URL: db.appURL, MaxConns: appConns, Tracer: db.stmts})
	}
	if err != nil {
		return nil, errors.Join(err, db.drop())
	}
	return db, nil
}

// newEmptyScratch creates a database with no migrations (for the peers' own schemas).
func newEmptyScratch(ctx context.Context, admin string) (*scratch, error) {
	db := &scratch{admin: admin, name: "bench_" + randomHex(6)}
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{db.name}.Sanitize()); err != nil {
		return nil, err
	}
	if db.ownerURL, err = withDatabase(admin, db.name, ""); err == nil {
		db.Owner, err = pgxpool.New(ctx, db.ownerURL)
	}
	if err != nil {
		return nil, errors.Join(err, db.drop())
	}
	return db, nil
}

func (db *scratch) drop() error {
	if db.App != nil {
		db.App.Close()
	}
	if db.Owner != nil {
		db.Owner.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db.admin)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db.name}.Sanitize()+" WITH (FORCE)")
	return err
}

func withDatabase(base, database, user string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	u.Path = "/" + database
	if user != "" {
		u.User = url.User(user)
	}
	// As the service's default DATABASE_URL: no TLS to a local server (for every peer alike).
	if q := u.Query(); q.Get("sslmode") == "" {
		q.Set("sslmode", "disable")
		u.RawQuery = q.Encode()
	}
	return u.String(), nil
}

// workspaces inserts n workspaces, as the owner.
func (db *scratch) workspaces(ctx context.Context, n int) ([]uuid.UUID, error) {
	rows, err := db.Owner.Query(ctx, `INSERT INTO workspaces (id, name) SELECT gen_random_uuid(), 'ws' FROM generate_series(1, $1) RETURNING id`, n)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
}

// backlog inserts n committed outbox events spread evenly over wss, as the owner, in
// transactions of 10,000 rows.
func (db *scratch) backlog(ctx context.Context, wss []uuid.UUID, n int) error {
	per := n / len(wss)
	for done := 0; done < len(wss); {
		k := min(len(wss)-done, max(1, 10000/max(per, 1)))
		_, err := db.Owner.Exec(ctx, `
			INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload)
			SELECT gen_random_uuid(), w, 'bench.happened', $3, 'thing', g::text, jsonb_build_object('thing_id', g::text)
			FROM unnest($1::uuid[]) AS w, generate_series(1, $2) AS g`, wss[done:done+k], per, benchQueue)
		if err != nil {
			return err
		}
		done += k
	}
	_, err := db.Owner.Exec(ctx, `VACUUM ANALYZE outbox_events`)
	return err
}

func newRedis(ctx context.Context, u string, poolSize int) (*redis.Client, error) {
	opt, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	opt.PoolSize = poolSize
	rdb := redis.NewClient(opt)
	return rdb, rdb.Ping(ctx).Err()
}

// deletePrefix deletes every Redis key under prefix.
func deletePrefix(rdb *redis.Client, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+":*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		if keys = append(keys, iter.Val()); len(keys) == 1000 {
			rdb.Unlink(ctx, keys...)
			keys = keys[:0]
		}
	}
	if len(keys) > 0 {
		rdb.Unlink(ctx, keys...)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// counting wraps a publisher and counts the messages whose Publish returned nil (the jobs are
// then visible in Redis); done is closed when target is reached. When seen is not nil, it
// records the time each message was first published.
type counting struct {
	next   message.Publisher
	target int64
	mu     sync.Mutex
	n      int64
	done   chan struct{}
	seen   map[string]time.Time
}

func newCounting(next message.Publisher, target int, record bool) *counting {
	c := &counting{next: next, target: int64(target), done: make(chan struct{})}
	if record {
		c.seen = make(map[string]time.Time, target)
	}
	return c
}

func (c *counting) Publish(topic string, msgs ...*message.Message) error {
	if err := c.next.Publish(topic, msgs...); err != nil {
		return err
	}
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen != nil {
		for _, m := range msgs {
			if _, ok := c.seen[m.UUID]; !ok {
				c.seen[m.UUID] = now
			}
		}
	}
	before := c.n
	c.n += int64(len(msgs))
	if before < c.target && c.n >= c.target {
		close(c.done)
	}
	return nil
}

func (c *counting) Close() error { return nil }

func (c *counting) count() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// wait waits for the target or the timeout.
func (c *counting) wait(ctx context.Context, timeout time.Duration) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("%d of %d published within %s", c.count(), c.target, timeout)
	}
}

func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func perSec(v float64, unit string) string { return fmt.Sprintf("%.0f %s/s", v, unit) }
