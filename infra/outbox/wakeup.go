package outbox

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// The wake-up. A dispatcher learns of new events three ways, none of which runs inside the
// business transaction (sql/012 dropped the NOTIFY trigger: a notifying commit takes a
// cluster-wide lock held through its WAL flush, which serialized every event-emitting
// writer):
//
//  1. In process: EventPublisher registers an after-commit hook (postgres.AfterCommit) per
//     workspace; once the commit has returned, the hook queues the workspace on a
//     Dispatcher running in the same process on the same database, if there is one.
//  2. Across processes: otherwise the hook hands the workspace to the publisher's Signal, a
//     Wakeup, which sends the workspaces signalled since its last send in one message (Redis
//     PUBLISH on the dispatchers' channel, or pg_notify in a transaction of its own), one
//     send in flight at a time and at most one per MinInterval: the cost is one message per
//     send, not per commit.
//  3. The poll: every dispatcher discovers due workspaces every BusyPollInterval while
//     discoveries find work, backing off to PollInterval when idle. A lost signal (a Redis
//     hiccup, a crash between commit and send, a full Wakeup) delays delivery by at most
//     PollInterval; no event is ever lost, because the rows are the truth and the poll
//     reads them.

// WakeChannel is the default channel of the wake-up messages: the Redis Pub/Sub channel
// (DispatcherConfig.WakeChannel) and the PostgreSQL NOTIFY channel (NotifyChannel).
const WakeChannel = "outbox_events"

// wakeAll is the payload that asks for a discovery instead of naming workspaces.
const wakeAll = "*"

// maxWakeIDs bounds the workspace ids of one message (NOTIFY payloads must stay under 8000
// bytes); a longer list is sent as wakeAll.
const maxWakeIDs = 200

// Signal is told that a committed transaction wrote outbox rows of a workspace. Signal must
// return at once (it runs on the committing goroutine) and may drop the signal: the
// dispatchers' poll finds the rows anyway.
type Signal interface {
	Signal(workspaceID uuid.UUID)
}

// local holds the Dispatchers running in this process, by database name, for the in-process
// wake-up.
var local = struct {
	mu  sync.RWMutex
	dbs map[string][]*wsQueue
}{dbs: map[string][]*wsQueue{}}

func registerLocal(db string, q *wsQueue) (unregister func()) {
	local.mu.Lock()
	local.dbs[db] = append(local.dbs[db], q)
	local.mu.Unlock()
	return func() {
		local.mu.Lock()
		defer local.mu.Unlock()
		qs := local.dbs[db]
		for i, x := range qs {
			if x == q {
				local.dbs[db] = append(qs[:i:i], qs[i+1:]...)
				break
			}
		}
		if len(local.dbs[db]) == 0 {
			delete(local.dbs, db)
		}
	}
}

// wakeLocal queues ws on a Dispatcher of this process running on database db and reports
// whether there was one.
func wakeLocal(db string, ws uuid.UUID) bool {
	local.mu.RLock()
	qs := local.dbs[db]
	var q *wsQueue
	if len(qs) > 0 {
		q = qs[int(ws[15])%len(qs)] // spread workspaces over the process's dispatchers
	}
	local.mu.RUnlock()
	if q == nil {
		return false
	}
	q.push(ws)
	return true
}

// WakeupConfig configures a Wakeup.
type WakeupConfig struct {
	// Redis, when set, sends each message with PUBLISH on Channel. Exactly one of Redis and
	// Postgres is required.
	Redis redis.UniversalClient
	// Postgres, when set, sends each message with pg_notify(Channel, …) in a transaction of
	// its own (never in a business transaction).
	Postgres *pgxpool.Pool
	// Channel is the Redis channel or NOTIFY channel. Default WakeChannel. Dispatchers
	// subscribe to it (DispatcherConfig.WakeChannel).
	Channel string
	// SendTimeout bounds one send. Default 1s.
	SendTimeout time.Duration
	// MinInterval is the least time between the starts of two sends: what is signalled
	// meanwhile waits and goes in one message. It bounds the sends to 1/MinInterval per
	// second whatever the commit rate, at the price of up to MinInterval of latency; the
	// dispatchers' rounds follow the messages, so it also sets how many events a round
	// claims under a steady stream. Default 5ms (2ms made more, smaller rounds and a longer
	// commit → job tail: docs/performance.md); negative: no wait.
	MinInterval time.Duration
	// Logger logs failed sends, at most one line per 10 s. Default: none.
	Logger *slog.Logger
}

// Wakeup is the cross-process Signal: it coalesces signalled workspaces and sends them to
// the dispatchers of other processes, one message per send, one send in flight at a time.
// Signal never blocks; a failed send is logged and dropped (the poll is the safety net).
// Close stops it; signals after Close are dropped. It is safe for concurrent use. Wakeup
// uses but never closes the Redis client or the pool.
type Wakeup struct {
	cfg     WakeupConfig
	mu      sync.Mutex
	pending map[uuid.UUID]struct{}
	kick    chan struct{}
	cancel  context.CancelFunc
	done    chan struct{}
	lastLog time.Time
}

var _ Signal = (*Wakeup)(nil)

// NewWakeup starts a Wakeup.
func NewWakeup(cfg WakeupConfig) (*Wakeup, error) {
	if (cfg.Redis == nil) == (cfg.Postgres == nil) {
		return nil, errors.New("outbox.NewWakeup: exactly one of Redis and Postgres is required")
	}
	setDefault(&cfg.Channel, WakeChannel)
	setDefault(&cfg.SendTimeout, time.Second)
	setDefault(&cfg.MinInterval, 5*time.Millisecond)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &Wakeup{cfg: cfg, pending: map[uuid.UUID]struct{}{}, kick: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx)
	return w, nil
}

// Signal implements Signal.
func (w *Wakeup) Signal(ws uuid.UUID) {
	w.mu.Lock()
	if len(w.pending) <= maxWakeIDs { // beyond, the message is wakeAll anyway
		w.pending[ws] = struct{}{}
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// Close stops sending and waits for the send in flight.
func (w *Wakeup) Close() {
	w.cancel()
	<-w.done
}

func (w *Wakeup) run(ctx context.Context) {
	defer close(w.done)
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		}
		if wait := w.cfg.MinInterval - time.Since(last); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		last = time.Now()
		w.mu.Lock()
		payload := wakePayload(w.pending)
		clear(w.pending)
		w.mu.Unlock()
		if payload == "" {
			continue
		}
		if err := w.send(ctx, payload); err != nil && ctx.Err() == nil && time.Since(w.lastLog) > 10*time.Second {
			w.lastLog = time.Now()
			w.cfg.Logger.Warn("outbox wake-up not sent; dispatchers will poll", "error", SanitizeError(err, 300))
		}
	}
}

func (w *Wakeup) send(ctx context.Context, payload string) error {
	ctx, cancel := context.WithTimeout(ctx, w.cfg.SendTimeout)
	defer cancel()
	if w.cfg.Redis != nil {
		return w.cfg.Redis.Publish(ctx, w.cfg.Channel, payload).Err()
	}
	_, err := w.cfg.Postgres.Exec(ctx, `SELECT pg_notify($1, $2)`, w.cfg.Channel, payload)
	return err
}

// wakePayload is the message naming ids: comma-separated, or wakeAll past maxWakeIDs.
func wakePayload(ids map[uuid.UUID]struct{}) string {
	if len(ids) == 0 {
		return ""
	}
	if len(ids) > maxWakeIDs {
		return wakeAll
	}
	var b strings.Builder
	for id := range ids {
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(id.String())
	}
	return b.String()
}

// onWake queues the workspaces a wake-up message names, or asks for a discovery.
func (d *Dispatcher) onWake(payload string) {
	if payload == wakeAll {
		d.Wake()
		return
	}
	var ids []uuid.UUID
	for s := range strings.SplitSeq(payload, ",") {
		if id, err := uuid.Parse(s); err == nil {
			ids = append(ids, id)
		}
	}
	d.queue.push(ids...)
}

// subscribe receives wake-up messages from Redis Pub/Sub until ctx is cancelled. Every
// (re)subscription triggers a discovery: messages published while it was not subscribed are
// lost.
func (d *Dispatcher) subscribe(ctx context.Context) {
	ps := d.cfg.WakeRedis.Subscribe(ctx, d.cfg.WakeChannel)
	// Receive does not return on ctx's end while it waits for a message: closing does.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		if stop() {
			_ = ps.Close()
		}
	}()
	retry := 100 * time.Millisecond
	for {
		msg, err := ps.Receive(ctx)
		if ctx.Err() != nil {
			return
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				d.Wake()
			}
			retry = 100 * time.Millisecond
		case *redis.Message:
			d.onWake(m.Payload)
		}
		if err != nil {
			d.log.Warn("outbox wake-up subscription failed; polling until resubscribed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
			select {
			case <-ctx.Done():
				return
			case <-time.After(retry):
			}
			retry = min(retry*2, 10*time.Second)
		}
	}
}
