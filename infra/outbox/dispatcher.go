package outbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/listingkit/listing/app/worker"
)

// NotifyChannel is the PostgreSQL channel the outbox_events insert trigger (sql/003)
// notifies with the workspace id as payload.
const NotifyChannel = "outbox_events"

// Event statuses (outbox_events.status).
const (
	StatusPending     = "pending"
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

// DispatcherConfig configures a Dispatcher. Zero values take the documented defaults.
type DispatcherConfig struct {
	// ID names this dispatcher in outbox_events.locked_by (with a per-claim suffix).
	// Default: hostname:pid:random.
	ID string
	// BatchSize is the most events claimed from one workspace at once. Default 500.
	BatchSize int
	// RoundWorkspaces is the most workspaces one round claims: a round claims each of them
	// in a transaction of its own but all in one round trip, publishes what it claimed in
	// one call per destination, and marks it in one more round trip. Under load, rounds
	// fill up and the cost per event falls. Default 32.
	RoundWorkspaces int
	// Concurrency is the number of rounds in flight at once; each holds at most one pooled
	// connection at a time (plus one for LISTEN and one for discovery). The work is I/O
	// bound (claim, publish, mark): Default 8.
	Concurrency int
	// Lease is how long a claim stays valid (locked_until = now + Lease). After it, another
	// dispatcher may claim and publish the events again. Default 30s; must exceed
	// PublishTimeout.
	Lease time.Duration
	// PublishTimeout bounds one Publish call. Default 10s.
	PublishTimeout time.Duration
	// PollInterval is the period of workspace discovery (outbox_due_workspaces), the
	// fallback when notifications are lost and the pick-up of retries whose backoff ended.
	// Default 1s.
	PollInterval time.Duration
	// DisableListen turns LISTEN/NOTIFY wake-up off: only polling finds work. Default false.
	DisableListen bool
	// DiscoveryLimit is the most workspaces one discovery returns. Default 1000, max 10000.
	DiscoveryLimit int
	// MaxAttempts is the number of failed deliveries after which an event becomes
	// dead_letter. Default 20.
	MaxAttempts int
	// BackoffBase is the delay after the first failure; it doubles per failure, with
	// jitter, up to BackoffMax. Defaults 1s and 5m.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// ShutdownTimeout bounds the marking or releasing of the in-flight batches after Run's
	// context is cancelled. Default 10s.
	ShutdownTimeout time.Duration
	// MetricsInterval is the period of the gauge refresh (ReadGauges). Default 15s; negative
	// disables it.
	MetricsInterval time.Duration
	// ErrorMaxLen bounds the sanitized last_error. Default 500, max MaxLastErrorLength.
	ErrorMaxLen int
}

// MaxLastErrorLength bounds an outbox event's last_error (the column's CHECK).
const MaxLastErrorLength = 1000

func (c *DispatcherConfig) setDefaults() {
	if c.ID == "" {
		host, _ := os.Hostname()
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		c.ID = fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b))
	}
	setDefault(&c.BatchSize, 500)
	setDefault(&c.RoundWorkspaces, 32)
	setDefault(&c.Concurrency, 8)
	setDefault(&c.Lease, 30*time.Second)
	setDefault(&c.PublishTimeout, 10*time.Second)
	setDefault(&c.PollInterval, time.Second)
	setDefault(&c.DiscoveryLimit, 1000)
	setDefault(&c.MaxAttempts, 20)
	setDefault(&c.BackoffBase, time.Second)
	setDefault(&c.BackoffMax, 5*time.Minute)
	setDefault(&c.ShutdownTimeout, 10*time.Second)
	setDefault(&c.MetricsInterval, 15*time.Second)
	setDefault(&c.ErrorMaxLen, 500)
}

func setDefault[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// Validate reports the first invalid field. It does not change c.
func (c DispatcherConfig) Validate() error {
	switch {
	case c.ID == "" || len(c.ID) > 180:
		return errors.New("outbox: DispatcherConfig.ID must have 1 to 180 bytes")
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("outbox: DispatcherConfig.BatchSize must be in [1, 10000], got %d", c.BatchSize)
	case c.RoundWorkspaces < 1 || c.RoundWorkspaces > 1000:
		return fmt.Errorf("outbox: DispatcherConfig.RoundWorkspaces must be in [1, 1000], got %d", c.RoundWorkspaces)
	case c.Concurrency < 1:
		return fmt.Errorf("outbox: DispatcherConfig.Concurrency must be >= 1, got %d", c.Concurrency)
	case c.PublishTimeout <= 0:
		return errors.New("outbox: DispatcherConfig.PublishTimeout must be positive")
	case c.Lease <= c.PublishTimeout:
		return fmt.Errorf("outbox: DispatcherConfig.Lease (%s) must exceed PublishTimeout (%s)", c.Lease, c.PublishTimeout)
	case c.PollInterval <= 0:
		return errors.New("outbox: DispatcherConfig.PollInterval must be positive")
	case c.DiscoveryLimit < 1 || c.DiscoveryLimit > 10000:
		return fmt.Errorf("outbox: DispatcherConfig.DiscoveryLimit must be in [1, 10000], got %d", c.DiscoveryLimit)
	case c.MaxAttempts < 1:
		return fmt.Errorf("outbox: DispatcherConfig.MaxAttempts must be >= 1, got %d", c.MaxAttempts)
	case c.BackoffBase <= 0 || c.BackoffMax < c.BackoffBase:
		return errors.New("outbox: DispatcherConfig.BackoffBase must be positive and at most BackoffMax")
	case c.ShutdownTimeout <= 0:
		return errors.New("outbox: DispatcherConfig.ShutdownTimeout must be positive")
	case c.ErrorMaxLen < 1 || c.ErrorMaxLen > MaxLastErrorLength:
		return fmt.Errorf("outbox: DispatcherConfig.ErrorMaxLen must be in [1, %d], got %d", MaxLastErrorLength, c.ErrorMaxLen)
	}
	return nil
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
	d.log.Info("outbox dispatcher started", "batch_size", d.cfg.BatchSize, "round_workspaces", d.cfg.RoundWorkspaces, "concurrency", d.cfg.Concurrency,
		"lease", d.cfg.Lease, "listen", !d.cfg.DisableListen)
	var wg sync.WaitGroup
	if !d.cfg.DisableListen {
		wg.Go(func() { d.listen(ctx) })
	}
	if d.cfg.MetricsInterval > 0 {
		wg.Go(func() { d.refreshGauges(ctx) })
	}
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

// feed discovers workspaces with due events at start, every PollInterval and on Wake.
func (d *Dispatcher) feed(ctx context.Context) {
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	for {
		if err := d.discover(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("outbox discovery failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-d.wake:
		}
	}
}

func (d *Dispatcher) discover(ctx context.Context) error {
	rows, err := d.pool.Query(ctx, `SELECT workspace_id FROM outbox_due_workspaces(now(), $1)`, d.cfg.DiscoveryLimit)
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.discover: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		return fmt.Errorf("outbox.Dispatcher.discover: %w", err)
	}
	d.queue.push(ids...)
	return nil
}

// listen holds one connection with LISTEN outbox_events and queues each notified
// workspace. After every (re)connection it triggers a discovery: notifications sent while
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
	if _, err := conn.Exec(ctx, "LISTEN "+NotifyChannel); err != nil {
		return fmt.Errorf("outbox.Dispatcher.listen: %w", err)
	}
	d.Wake()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return fmt.Errorf("outbox.Dispatcher.listen: %w", err)
		}
		if ws, err := uuid.Parse(n.Payload); err == nil {
			d.queue.push(ws)
		}
	}
}

// work runs rounds of up to RoundWorkspaces queued workspaces until ctx is cancelled.
func (d *Dispatcher) work(ctx context.Context) {
	for {
		wss, ok := d.queue.pop(ctx, d.cfg.RoundWorkspaces)
		if !ok {
			return
		}
		d.dispatchRound(ctx, wss)
	}
}

// claimed is one claimed outbox row.
type claimed struct {
	ID          uuid.UUID
	WorkspaceID uuid.UUID
	EventType   string
	Destination string
	Payload     []byte
	Metadata    map[string]string
	CreatedAt   time.Time
	Attempts    int
}

// dispatchRound claims one batch of each of wss, requeues the workspaces whose batch was full
// (fairness: every other queued workspace gets its batch first; other workers may take their
// next batch meanwhile), publishes, and marks.
func (d *Dispatcher) dispatchRound(ctx context.Context, wss []uuid.UUID) {
	token := fmt.Sprintf("%s/%d", d.cfg.ID, d.claimSeq.Add(1))
	claimedAt := time.Now() // the leases end at the server's now() + Lease, a little later
	rows, err := d.claim(ctx, wss, token, d.cfg.BatchSize)
	if err != nil && ctx.Err() == nil {
		// Workspaces whose claim failed are found again by the next discovery.
		d.log.Warn("outbox claim failed", "workspaces", len(wss), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	}
	if len(rows) == 0 {
		return
	}
	for ws, idx := range byWorkspace(rows) {
		if len(idx) >= d.cfg.BatchSize {
			d.queue.requeue(ws)
		}
	}
	d.deliver(ctx, token, rows, claimedAt)
}

// byWorkspace indexes rows by workspace.
func byWorkspace(rows []claimed) map[uuid.UUID][]int {
	m := map[uuid.UUID][]int{}
	for i, r := range rows {
		m[r.WorkspaceID] = append(m[r.WorkspaceID], i)
	}
	return m
}

// idsOf returns the event ids of rows[idx].
func idsOf(rows []claimed, idx []int) []uuid.UUID {
	ids := make([]uuid.UUID, len(idx))
	for k, i := range idx {
		ids[k] = rows[i].ID
	}
	return ids
}

// claimSQL selects up to $2 due rows of workspace $1 (expired leases first, then pending by
// next_attempt_at) with FOR UPDATE SKIP LOCKED, each side along its own partial index, and
// marks them dispatching under token $3 with a lease of $4 ms. A reclaimed expired lease
// counts as an attempt; one that reaches MaxAttempts ($5) goes to dead_letter instead of
// being claimed again (an event whose every delivery ends without an outcome, e.g. one that
// crashes its dispatcher, stops there). Rows locked beyond the limit are released unchanged
// at commit.
const claimSQL = `
	WITH e AS (
	  SELECT id, attempt_count FROM outbox_events
	  WHERE workspace_id = $1 AND status = 'dispatching' AND locked_until <= now()
	  ORDER BY locked_until LIMIT $2 FOR UPDATE SKIP LOCKED),
	dead AS (
	  UPDATE outbox_events o
	  SET status = 'dead_letter', attempt_count = o.attempt_count + 1, locked_by = NULL, locked_until = NULL,
	      last_error = 'lease expired before any delivery outcome was recorded, ' || (o.attempt_count + 1) || ' attempts'
	  FROM e WHERE o.id = e.id AND e.attempt_count + 1 >= $5),
	p AS (
	  SELECT id FROM outbox_events
	  WHERE workspace_id = $1 AND status = 'pending' AND next_attempt_at <= now()
	  ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED),
	c AS (
	  SELECT id, 1 AS expired FROM e WHERE e.attempt_count + 1 < $5 UNION ALL SELECT id, 0 FROM p LIMIT $2)
	UPDATE outbox_events o
	SET status = 'dispatching', locked_by = $3, locked_until = now() + $4 * interval '1 millisecond',
	    attempt_count = o.attempt_count + c.expired
	FROM c WHERE o.id = c.id
	RETURNING o.id, o.workspace_id, o.event_type, o.destination, o.event_payload, o.metadata, o.created_at, o.attempt_count`

// claim claims up to limit due rows of each of wss under token, each workspace in a committed
// transaction of its own, all in one round trip. It returns the rows of the claims that
// committed, and the failures of the others (their rows stay due).
func (d *Dispatcher) claim(ctx context.Context, wss []uuid.UUID, token string, limit int) ([]claimed, error) {
	got := make([][]claimed, len(wss))
	stmts := make([]scopedStmt, len(wss))
	for i, ws := range wss {
		stmts[i] = scopedStmt{ws: ws, sql: claimSQL, args: []any{ws, limit, token, d.cfg.Lease.Milliseconds(), d.cfg.MaxAttempts},
			read: func(rows pgx.Rows) (err error) {
				got[i], err = collectClaimed(rows)
				return err
			}}
	}
	var out []claimed
	var failed []error
	for i, err := range inWorkspaces(ctx, d.pool, stmts) {
		if err != nil {
			failed = append(failed, fmt.Errorf("workspace %s: %w", wss[i], err))
			continue
		}
		out = append(out, got[i]...)
	}
	if len(failed) > 0 {
		return out, fmt.Errorf("outbox.Dispatcher.claim: %w", errors.Join(failed...))
	}
	return out, nil
}

// collectClaimed reads claimed rows. The metadata is context (correlation, trace, occurred
// at): a row whose metadata is not an object of strings is delivered without it rather than
// held back.
func collectClaimed(rows pgx.Rows) ([]claimed, error) {
	var out []claimed
	for rows.Next() {
		var c claimed
		var meta []byte
		if err := rows.Scan(&c.ID, &c.WorkspaceID, &c.EventType, &c.Destination, &c.Payload, &meta, &c.CreatedAt, &c.Attempts); err != nil {
			return nil, err
		}
		if json.Unmarshal(meta, &c.Metadata) != nil {
			c.Metadata = nil
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// toMessage builds the delivered message: UUID = event id (the BullMQ jobId), payload = job
// data JSON, metadata event_type (the job name), aggregate, correlation and trace.
func toMessage(c claimed) (*message.Message, error) {
	ws := c.WorkspaceID.String()
	occurred := c.CreatedAt
	if t, err := time.Parse(time.RFC3339Nano, c.Metadata[MetadataOccurredAt]); err == nil {
		occurred = t
	}
	jd := worker.Envelope{
		EventID:       c.ID.String(),
		WorkspaceID:   ws,
		EventType:     c.EventType,
		Payload:       c.Payload,
		OccurredAt:    occurred.UTC(),
		CorrelationID: c.Metadata[MetadataCorrelationID],
	}
	if tp, ts := c.Metadata[MetadataTraceParent], c.Metadata[MetadataTraceState]; tp != "" || ts != "" {
		jd.Trace = &worker.Trace{TraceParent: tp, TraceState: ts}
	}
	b, err := json.Marshal(jd)
	if err != nil {
		return nil, err
	}
	msg := message.NewMessage(c.ID.String(), b)
	for _, k := range []string{MetadataAggregateType, MetadataAggregateID, MetadataCorrelationID, MetadataTraceParent, MetadataTraceState,
		MetadataJobAttempt, MetadataJobSnoozes, MetadataJobSnoozedMs} {
		if v := c.Metadata[k]; v != "" {
			msg.Metadata.Set(k, v)
		}
	}
	msg.Metadata.Set(MetadataEventType, c.EventType)
	msg.Metadata.Set("workspace_id", ws)
	return msg, nil
}

// errNotTried marks a claimed row that deliver did not get to publish before its round's
// publish deadline.
var errNotTried = errors.New("outbox: not published before the round's deadline")

// deliver publishes claimed rows grouped by destination and records the outcome. When ctx is
// already cancelled nothing is published: the claims are released. Publishing stops at the
// round's deadline, claimedAt + Lease - Lease/5, so that the marks land while the leases
// still hold even when destinations hang: rows not tried by then are released (no attempt
// counted), not marked failed.
func (d *Dispatcher) deliver(ctx context.Context, token string, rows []claimed, claimedAt time.Time) {
	bg := context.WithoutCancel(ctx)
	if ctx.Err() != nil {
		d.release(bg, token, rows)
		return
	}
	pubCtx, cancelPub := context.WithDeadline(bg, claimedAt.Add(d.cfg.Lease-d.cfg.Lease/5))
	defer cancelPub()
	groups := map[string][]int{}
	var order []string
	for i, r := range rows {
		if _, ok := groups[r.Destination]; !ok {
			order = append(order, r.Destination)
		}
		groups[r.Destination] = append(groups[r.Destination], i)
	}
	errs := make([]error, len(rows))
	for i := range errs {
		errs[i] = errNotTried
	}
	for _, dest := range order {
		idx := groups[dest]
		if pubCtx.Err() != nil {
			break
		}
		pub, err := d.pubs.PublisherFor(dest)
		if err != nil {
			for _, i := range idx {
				errs[i] = err
			}
			continue
		}
		d.publishGroup(pubCtx, pub, dest, rows, idx, errs)
	}
	var ok, failed, untried []claimed
	var failErrs []error
	published := make(map[string]int, len(order))
	for i, r := range rows {
		switch {
		case errs[i] == nil:
			ok = append(ok, r)
			published[r.Destination]++
		case errors.Is(errs[i], errNotTried):
			untried = append(untried, r)
		default:
			failed = append(failed, r)
			failErrs = append(failErrs, errs[i])
		}
	}
	if len(untried) > 0 {
		d.log.Warn("outbox round deadline reached; releasing the events not yet published", "events", len(untried))
		d.release(bg, token, untried)
	}
	for dest, n := range published {
		d.metrics.Published.WithLabelValues(dest).Add(float64(n))
	}
	d.metrics.Attempts.WithLabelValues("success").Add(float64(len(ok)))
	d.metrics.Attempts.WithLabelValues("failure").Add(float64(len(failed)))
	markCtx, cancel := context.WithTimeout(bg, d.cfg.ShutdownTimeout)
	defer cancel()
	if err := d.mark(markCtx, token, ok, failed, failErrs); err != nil {
		d.log.Error("outbox marking failed; the events will be published again after their lease",
			"events", len(rows), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	}
}

// publishGroup publishes rows[idx] to dest in one call; when that fails, unless the
// destination looks unreachable, each message is published alone so that one failing event
// does not fail the others, until one fails as unreachable (then the rest fail with it) or
// ctx (the round's deadline) ends (then the rest stay errNotTried). errs receives the per-row
// outcome.
func (d *Dispatcher) publishGroup(ctx context.Context, pub message.Publisher, dest string, rows []claimed, idx []int, errs []error) {
	msgs := make([]*message.Message, 0, len(idx))
	okIdx := make([]int, 0, len(idx))
	for _, i := range idx {
		m, err := toMessage(rows[i])
		if err != nil {
			errs[i] = err
			continue
		}
		msgs = append(msgs, m)
		okIdx = append(okIdx, i)
	}
	if len(msgs) == 0 {
		return
	}
	publish := func(ms ...*message.Message) error {
		pctx, cancel := context.WithTimeout(ctx, d.cfg.PublishTimeout)
		defer cancel()
		for _, m := range ms {
			m.SetContext(pctx)
		}
		return safePublish(pub, dest, ms)
	}
	err := publish(msgs...)
	if err == nil || len(msgs) == 1 || unreachable(err) {
		for _, i := range okIdx {
			errs[i] = err
		}
		return
	}
	d.log.Warn("outbox batch publish failed; publishing one by one", "destination", dest,
		"events", len(msgs), "error", SanitizeError(err, d.cfg.ErrorMaxLen))
	var down error // set once the destination looks unreachable: the rest fail with it, untried
	for k, m := range msgs {
		switch {
		case down != nil:
			errs[okIdx[k]] = down
		case ctx.Err() != nil: // the round's deadline: left errNotTried
		default:
			errs[okIdx[k]] = publish(m)
			if unreachable(errs[okIdx[k]]) {
				down = errs[okIdx[k]]
			}
		}
	}
}

// unreachable reports whether a publish error says the destination could not be reached
// (connection refused or reset, a network timeout, no free Redis connection, PublishTimeout):
// then no message can get through, and trying the others one by one would only multiply the
// wait.
func unreachable(err error) bool {
	var ne net.Error
	return err != nil && (errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, redis.ErrPoolTimeout) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET))
}

// safePublish turns a publisher panic into an error: a poison message must not stop the
// dispatcher.
func safePublish(pub message.Publisher, topic string, msgs []*message.Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("publisher panic: %v", r)
		}
	}()
	return pub.Publish(topic, msgs...)
}

// markDispatchedSQL sets the events $1 dispatched where claim $2 still holds them, and
// returns their dispatch latency.
const markDispatchedSQL = `
	UPDATE outbox_events
	SET status = 'dispatched', dispatched_at = clock_timestamp(), locked_by = NULL, locked_until = NULL, last_error = NULL
	WHERE id = ANY($1) AND locked_by = $2 AND status = 'dispatching'
	RETURNING extract(epoch FROM dispatched_at - created_at)::float8`

// markFailedSQL records failed deliveries where claim $5 still holds them: attempt_count+1,
// back to pending after the event's backoff, or dead_letter from attempt $4 on, with the
// sanitized last_error.
const markFailedSQL = `
	UPDATE outbox_events o
	SET attempt_count = o.attempt_count + 1,
	    status = CASE WHEN o.attempt_count + 1 >= $4 THEN 'dead_letter' ELSE 'pending' END,
	    next_attempt_at = now() + make_interval(secs => f.delay),
	    last_error = f.err, locked_by = NULL, locked_until = NULL
	FROM unnest($1::uuid[], $2::float8[], $3::text[]) AS f(id, delay, err)
	WHERE o.id = f.id AND o.locked_by = $5 AND o.status = 'dispatching'
	RETURNING o.status`

// releaseSQL hands unpublished claims back: pending, no lock, attempt not counted.
const releaseSQL = `
	UPDATE outbox_events SET status = 'pending', locked_by = NULL, locked_until = NULL
	WHERE id = ANY($1) AND locked_by = $2 AND status = 'dispatching'`

// mark records the outcome of one round under token, only where the claim still holds the
// events (a stale dispatcher cannot overwrite a newer claim): published ones dispatched
// (observing their latency), failed ones back to pending with backoff or dead_letter past
// MaxAttempts. One transaction per workspace and outcome, all in one round trip.
func (d *Dispatcher) mark(ctx context.Context, token string, published, failed []claimed, errs []error) error {
	var stmts []scopedStmt
	var expected int
	var latencies []float64
	for ws, idx := range byWorkspace(published) {
		ids := idsOf(published, idx)
		expected += len(ids)
		stmts = append(stmts, scopedStmt{ws: ws, sql: markDispatchedSQL, args: []any{ids, token},
			read: func(rows pgx.Rows) error {
				lat, err := pgx.CollectRows(rows, pgx.RowTo[float64])
				latencies = append(latencies, lat...)
				return err
			}})
	}
	dead := 0
	msgs := make([]string, len(failed))
	for ws, idx := range byWorkspace(failed) {
		ids := idsOf(failed, idx)
		delays := make([]float64, len(idx))
		wsMsgs := make([]string, len(idx))
		for k, i := range idx {
			delays[k] = backoff(d.cfg.BackoffBase, d.cfg.BackoffMax, failed[i].Attempts+1).Seconds()
			msgs[i] = SanitizeError(errs[i], d.cfg.ErrorMaxLen)
			wsMsgs[k] = msgs[i]
		}
		stmts = append(stmts, scopedStmt{ws: ws, sql: markFailedSQL, args: []any{ids, delays, wsMsgs, d.cfg.MaxAttempts, token},
			read: func(rows pgx.Rows) error {
				st, err := pgx.CollectRows(rows, pgx.RowTo[string])
				dead += countOf(st, StatusDeadLetter)
				return err
			}})
	}
	markErrs := slices.DeleteFunc(inWorkspaces(ctx, d.pool, stmts), func(err error) bool { return err == nil })
	for _, s := range latencies {
		d.metrics.Latency.Observe(s)
	}
	if lost := expected - len(latencies); lost > 0 && len(markErrs) == 0 {
		d.log.Warn("outbox lease lost before marking; another dispatcher holds the events", "events", lost)
	}
	if len(failed) > 0 {
		d.metrics.DeadLettered.Add(float64(dead))
		d.log.Warn("outbox delivery failed", "events", len(failed), "dead_lettered", dead, "first_event_id", failed[0].ID,
			"workspace_id", failed[0].WorkspaceID, "event_type", failed[0].EventType, "destination", failed[0].Destination, "error", msgs[0])
	}
	if len(markErrs) > 0 {
		return fmt.Errorf("outbox.Dispatcher.mark: %w", errors.Join(markErrs...))
	}
	return nil
}

func countOf[T comparable](s []T, v T) (n int) {
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// release hands unpublished claims back (pending, no lock, attempt not counted).
func (d *Dispatcher) release(ctx context.Context, token string, rows []claimed) {
	var stmts []scopedStmt
	for ws, idx := range byWorkspace(rows) {
		stmts = append(stmts, scopedStmt{ws: ws, sql: releaseSQL, args: []any{idsOf(rows, idx), token}})
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.ShutdownTimeout)
	defer cancel()
	if err := errors.Join(inWorkspaces(ctx, d.pool, stmts)...); err != nil {
		d.log.Warn("outbox release failed; the lease will expire", "events", len(rows),
			"error", SanitizeError(fmt.Errorf("outbox.Dispatcher.release: %w", err), d.cfg.ErrorMaxLen))
	}
}

// refreshGauges sets the pending, oldest-pending-age and dead-letter gauges every
// MetricsInterval.
func (d *Dispatcher) refreshGauges(ctx context.Context) {
	t := time.NewTicker(d.cfg.MetricsInterval)
	defer t.Stop()
	for {
		if g, err := ReadGauges(ctx, d.pool); err == nil {
			d.metrics.SetGauges(g)
		} else if ctx.Err() == nil {
			d.log.Warn("outbox stats failed", "error", SanitizeError(err, d.cfg.ErrorMaxLen))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// wsQueue holds the workspaces waiting for a batch, each at most once, in two FIFOs: fresh
// workspaces (found by discovery or notification) go before continuing ones (re-queued
// after a full batch), so a new event waits for at most the batches already in flight, and
// backlogs take turns.
type wsQueue struct {
	mu     sync.Mutex
	fresh  []uuid.UUID
	cont   []uuid.UUID
	queued map[uuid.UUID]struct{}
	signal chan struct{}
}

func newWSQueue() *wsQueue {
	return &wsQueue{queued: map[uuid.UUID]struct{}{}, signal: make(chan struct{}, 1)}
}

// push queues fresh workspaces.
func (q *wsQueue) push(ids ...uuid.UUID) { q.add(false, ids) }

// requeue queues a workspace that just had a full batch, behind every other.
func (q *wsQueue) requeue(id uuid.UUID) { q.add(true, []uuid.UUID{id}) }

func (q *wsQueue) add(cont bool, ids []uuid.UUID) {
	if len(ids) == 0 {
		return
	}
	q.mu.Lock()
	for _, id := range ids {
		if _, ok := q.queued[id]; ok {
			continue
		}
		q.queued[id] = struct{}{}
		if cont {
			q.cont = append(q.cont, id)
		} else {
			q.fresh = append(q.fresh, id)
		}
	}
	q.mu.Unlock()
	q.notify()
}

func (q *wsQueue) notify() {
	select {
	case q.signal <- struct{}{}:
	default:
	}
}

// take moves up to n ids from the front of *from to the end of out.
func take(from *[]uuid.UUID, n int, out []uuid.UUID) []uuid.UUID {
	k := min(n, len(*from))
	out = append(out, (*from)[:k]...)
	clear((*from)[:k])
	*from = (*from)[k:]
	return out
}

// pop takes up to n queued workspaces, fresh ones first (at most n-1 of them while a
// continuing one waits), waiting for at least one. It returns false when ctx is cancelled.
func (q *wsQueue) pop(ctx context.Context, n int) ([]uuid.UUID, bool) {
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		q.mu.Lock()
		// Fresh workspaces first; but a round of several keeps one place for a continuing
		// backlog, so that a steady stream of new workspaces cannot starve it.
		freshMax := n
		if n > 1 && len(q.cont) > 0 {
			freshMax = n - 1
		}
		out := take(&q.fresh, freshMax, nil)
		out = take(&q.cont, n-len(out), out)
		for _, id := range out {
			delete(q.queued, id)
		}
		more := len(q.fresh)+len(q.cont) > 0
		q.mu.Unlock()
		if len(out) > 0 {
			if more {
				q.notify()
			}
			return out, true
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.signal:
		}
	}
}
