package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

// NotifyChannel is the default PostgreSQL NOTIFY channel of wake-ups (see Wakeup): the
// payload is comma-separated workspace ids, or "*" for a discovery. Until sql/012 an insert
// trigger notified it inside the business transaction.
const NotifyChannel = WakeChannel

// Event statuses as operators see them. outbox_events.status stores pending, held (fair
// share) and dead_letter; dispatching is a pending event with a lease (locked_by,
// locked_until); dispatched events live in the log, outbox_dispatched.
const (
	StatusPending     = "pending"
	StatusHeld        = "held"
	StatusDispatching = "dispatching"
	StatusDispatched  = "dispatched"
	StatusDeadLetter  = "dead_letter"
)

// PublisherRouter chooses the watermill publisher of a destination (a BullMQ queue name, a
// Redis stream, a GoChannel topic in tests). The destination is also the topic passed to
// Publish. The Dispatcher never closes the publishers: their owner does, after Run returns.
type PublisherRouter interface {
	PublisherFor(destination string) (message.Publisher, error)
}

// PublisherRouterFunc adapts a function to PublisherRouter.
type PublisherRouterFunc func(destination string) (message.Publisher, error)

// PublisherFor implements PublisherRouter.
func (f PublisherRouterFunc) PublisherFor(destination string) (message.Publisher, error) {
	return f(destination)
}

// PublisherMap is a static PublisherRouter; an unknown destination is an error (the event
// then backs off and ends in dead_letter like any failed delivery).
type PublisherMap map[string]message.Publisher

// PublisherFor implements PublisherRouter.
func (m PublisherMap) PublisherFor(destination string) (message.Publisher, error) {
	p, ok := m[destination]
	if !ok || p == nil {
		return nil, fmt.Errorf("outbox: no publisher for destination %q", destination)
	}
	return p, nil
}

// Dispatcher delivers committed outbox events to their destinations, at least once. See the
// package documentation for the claim/lease protocol. A Dispatcher is started once with Run;
// any number of Dispatchers (processes or goroutines) may run on one database.
type Dispatcher struct {
	cfg     DispatcherConfig
	pool    *pgxpool.Pool
	pubs    PublisherRouter
	log     *slog.Logger
	metrics *Metrics

	queue    *wsQueue
	low      *lowWater
	disc     discoveryMark // feed's alone
	fair     fairShare
	held     heldLanes
	wake     chan struct{}
	claimSeq atomic.Uint64
	running  atomic.Bool
}

// NewDispatcher returns a Dispatcher using pool (the app_user pool: RLS applies) and
// publishers. logger may be nil (no logs); reg may be nil (metrics kept but not
// registered). Metrics already registered on reg by another Dispatcher are shared.
func NewDispatcher(cfg DispatcherConfig, pool *pgxpool.Pool, publishers PublisherRouter, logger *slog.Logger, reg prometheus.Registerer) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("outbox.NewDispatcher: %w", err)
	}
	if pool == nil || publishers == nil {
		return nil, errors.New("outbox.NewDispatcher: pool and publishers are required")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m, err := NewMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("outbox.NewDispatcher: %w", err)
	}
	return &Dispatcher{
		cfg:     cfg,
		pool:    pool,
		pubs:    publishers,
		log:     logger.With("component", "outbox.dispatcher", "dispatcher_id", cfg.ID),
		metrics: m,
		queue:   newWSQueue(),
		low:     newLowWater(cfg.FullClaimInterval),
		disc:    discoveryMark{every: cfg.FullClaimInterval},
		fair:    newFairShare(cfg.FairShare),
		held:    heldLanes{m: map[uuid.UUID][]heldLane{}},
		wake:    make(chan struct{}, 1),
	}, nil
}

// Config returns the configuration with defaults applied.
func (d *Dispatcher) Config() DispatcherConfig { return d.cfg }

// Run dispatches until ctx is cancelled, then stops claiming, finishes or releases the
// batches in flight (bounded by ShutdownTimeout) and returns nil. It returns an error only
// when it cannot start. Run may be called once.
func (d *Dispatcher) Run(ctx context.Context) error {
	if !d.running.CompareAndSwap(false, true) {
		return errors.New("outbox.Dispatcher.Run: already running")
	}
	d.log.Info("outbox dispatcher started", "batch_size", d.cfg.BatchSize, "round_events", d.cfg.RoundEvents, "round_workspaces", d.cfg.RoundWorkspaces, "concurrency", d.cfg.Concurrency,
		"lease", d.cfg.Lease, "listen", !d.cfg.DisableListen, "wake_redis", d.cfg.WakeRedis != nil)
	defer registerLocal(d.pool.Config().ConnConfig.Database, d.queue)()
	var wg sync.WaitGroup
	if !d.cfg.DisableListen {
		wg.Go(func() { d.listen(ctx) })
	}
	if d.cfg.WakeRedis != nil {
		wg.Go(func() { d.subscribe(ctx) })
	}
	if d.cfg.MetricsInterval > 0 {
		wg.Go(func() { d.refreshGauges(ctx) })
	}
	wg.Go(func() { d.sweepFairShare(ctx) })
	for range d.cfg.Concurrency {
		wg.Go(func() { d.work(ctx) })
	}
	d.feed(ctx)
	wg.Wait()
	d.log.Info("outbox dispatcher stopped")
	return nil
}

// Wake asks the dispatcher to discover due workspaces now (tests, or a caller that knows it
// just committed events).
func (d *Dispatcher) Wake() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// feed discovers workspaces with due events at start, on Wake, and on an adaptive poll:
// every BusyPollInterval while discoveries find work, the period doubling after each empty
// one up to PollInterval. The period is also at least discoveryPause times the last
// discovery's duration (at most PollInterval), so that discovery, whose cost grows with
// the workspaces that have work, takes a bounded share of the database.
func (d *Dispatcher) feed(ctx context.Context) {
	interval := d.cfg.BusyPollInterval
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		started := time.Now()
		found, err := d.discover(ctx)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("outbox discovery failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		if found > 0 {
			interval = d.cfg.BusyPollInterval
		} else {
			interval = min(interval*2, d.cfg.PollInterval)
		}
		t.Reset(min(max(interval, discoveryPause*time.Since(started)), d.cfg.PollInterval))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

// discoveryPause is the least period of discovery, in multiples of the last one's duration.
const discoveryPause = 4

// discover queues the workspaces with due events and returns how many it found. It looks
// at the events due since its mark (discoveryMark), or at all of them.
func (d *Dispatcher) discover(ctx context.Context) (int, error) {
	since, seq := d.disc.since(d.low, time.Now())
	var now time.Time
	var ids []uuid.UUID
	err := d.pool.QueryRow(ctx, `SELECT now(), ARRAY(SELECT workspace_id FROM outbox_due_workspaces(now(), $1, $2))`,
		d.cfg.DiscoveryLimit, since).Scan(&now, &ids)
	if err != nil {
		d.disc.reset()
		return 0, fmt.Errorf("outbox.Dispatcher.discover: %w", err)
	}
	d.disc.advance(since, seq, now, len(ids) >= d.cfg.DiscoveryLimit)
	d.queue.push(ids...)
	return len(ids), nil
}

// listen holds one connection with LISTEN on WakeChannel and queues each notified
// workspace (see Wakeup). After every (re)connection it triggers a discovery: notifications sent while
// it was not listening are lost.
func (d *Dispatcher) listen(ctx context.Context) {
	retry := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := d.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		d.log.Warn("outbox listen failed; polling until reconnected", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(retry*2, 10*time.Second)
	}
}

func (d *Dispatcher) listenOnce(ctx context.Context) error {
	pc, err := d.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.listen: %w", err)
	}
	conn := pc.Hijack() // ours alone: a LISTENing session must not return to the pool
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{d.cfg.WakeChannel}.Sanitize()); err != nil {
		return fmt.Errorf("outbox.Dispatcher.listen: %w", err)
	}
	d.Wake()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("outbox.Dispatcher.listen: %w", err)
		}
		d.onWake(n.Payload)
	}
}

// refreshGauges sets the pending, oldest-pending-age, dead-letter and held (fair share)
// gauges every MetricsInterval.
func (d *Dispatcher) refreshGauges(ctx context.Context) {
	t := time.NewTicker(d.cfg.MetricsInterval)
	defer t.Stop()
	for {
		if g, err := ReadGauges(ctx, d.pool); err == nil {
			d.metrics.SetGauges(g)
		} else if ctx.Err() == nil {
			d.log.Warn("outbox stats failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		if err := d.refreshHeld(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("outbox stats failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
