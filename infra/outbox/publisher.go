package outbox

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/components/cqrs"
	"github.com/ThreeDotsLabs/watermill/components/forwarder"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
)

// Metadata keys written on every outbox row (outbox_events.metadata) and on every dispatched
// message. MetadataEventType equals infra/bullmq's MetadataJobName: it becomes the job name.
const (
	MetadataEventType     = "event_type"
	MetadataAggregateType = "aggregate_type"
	MetadataAggregateID   = "aggregate_id"
	MetadataOccurredAt    = "occurred_at"
	MetadataCorrelationID = "correlation_id"
	MetadataTraceParent   = "traceparent"
	MetadataTraceState    = "tracestate"
)

// forwarderTopic is the topic the forwarder publisher wraps every message for. Our schema
// adapter accepts only it: the real destination travels inside the forwarder's envelope.
const forwarderTopic = "outbox_events"

// ErrUnroutable is returned by Publish for an event type the routing table does not know.
var ErrUnroutable = errors.New("outbox: no destination for event type")

// Router maps an event type to its destination: the BullMQ queue (job families) or the
// stream (integration events) the dispatcher publishes it to.
type Router interface {
	Destination(eventType string) (string, error)
}

// Routes is a static routing table, event type → destination. It implements Router; an
// unknown event type is an error wrapping ErrUnroutable.
type Routes map[string]string

// Destination implements Router.
func (r Routes) Destination(eventType string) (string, error) {
	d, ok := r[eventType]
	if !ok || d == "" {
		return "", fmt.Errorf("%w: %q", ErrUnroutable, eventType)
	}
	return d, nil
}

// IdentifiedEvent is implemented by events that carry their own id; Publish then uses it as
// the outbox id (and BullMQ jobId) instead of a new UUIDv7.
type IdentifiedEvent interface {
	EventID() uuid.UUID
}

// PublisherConfig configures NewEventPublisher.
type PublisherConfig struct {
	// Routes maps every event type to its destination. Required.
	Routes Router
	// Logger for watermill's internals. Default: none.
	Logger watermill.LoggerAdapter
	// Signal is told, after the commit, of each workspace whose transaction wrote outbox
	// rows, when no Dispatcher of this process runs on the same database (those are woken
	// directly). Typically a Wakeup (Redis PUBLISH) for dispatchers in other processes.
	// Default: none (they find the rows by polling).
	Signal Signal
}

// Validate reports the first invalid field. It does not change c.
func (c PublisherConfig) Validate() error {
	if c.Routes == nil {
		return errors.New("outbox: PublisherConfig.Routes is required")
	}
	return nil
}

// EventPublisher implements port.EventPublisher: it records domain events in outbox_events
// within the RLS transaction ctx carries (postgres.TxFromContext), through a watermill
// cqrs.EventBus → forwarder.Publisher → watermill-sql Publisher built on that transaction
// with SchemaAdapter (which reads each row's fields from the message the bus published,
// carried in the forwarder message's context, rather than decoding the forwarder's JSON
// envelope again). One watermill publisher is built per Publish call, for the one
// transaction in ctx; nothing is committed or rolled back here: the owner of the transaction
// decides. It is safe for concurrent use by different transactions.
type EventPublisher struct {
	cfg PublisherConfig
}

var _ port.EventPublisher = (*EventPublisher)(nil)

// NewEventPublisher returns an EventPublisher.
func NewEventPublisher(cfg PublisherConfig) (*EventPublisher, error) {
	if cfg.Logger == nil {
		cfg.Logger = watermill.NopLogger{}
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("outbox.NewEventPublisher: %w", err)
	}
	return &EventPublisher{cfg: cfg}, nil
}

// Publish inserts one outbox row per event in the transaction of ctx, with its COMMIT (see
// atCommit: an insert the server refuses fails the commit). It fails, queuing nothing more,
// when ctx carries no transaction or no workspace scope, or when an event type has no
// route. Rows become visible to dispatchers when the transaction commits; once the
// commit has returned, a Dispatcher of this process on the same database is woken for the
// workspace, or else the configured Signal is told (postgres.AfterCommit; nothing is sent
// for a transaction that rolls back).
func (p *EventPublisher) Publish(ctx context.Context, events ...domain.Event) error {
	if len(events) == 0 {
		return nil
	}
	bus, err := p.EventBus(ctx)
	if err != nil {
		return fmt.Errorf("outbox.EventPublisher.Publish: %w", err)
	}
	for _, ev := range events {
		if ev == nil {
			return errors.New("outbox.EventPublisher.Publish: nil event")
		}
		if err := bus.Publish(ctx, ev); err != nil {
			return fmt.Errorf("outbox.EventPublisher.Publish: %s: %w", ev.EventType(), err)
		}
	}
	return p.wakeAfterCommit(ctx)
}

// wakeKey dedupes the after-commit wake-up of one transaction.
type wakeKey struct{}

// wakeAfterCommit registers the wake-up of the workspace of ctx's transaction, once per
// transaction.
func (p *EventPublisher) wakeAfterCommit(ctx context.Context) error {
	tx, scope, err := postgres.TxFromContext(ctx)
	if err != nil {
		return fmt.Errorf("outbox.EventPublisher.Publish: %w", err)
	}
	db := databaseOf(tx.Conn())
	return postgres.AfterCommit(ctx, wakeKey{}, func() {
		if !wakeLocal(db, scope.WorkspaceID) && p.cfg.Signal != nil {
			p.cfg.Signal.Signal(scope.WorkspaceID)
		}
	})
}

// TaskEnded returns what a worker calls once a task of a fair-shared queue (FairShare) of
// workspace ws has ended in database pool: the end's transaction freed the task's slot and
// set the next held request of its lane pending (sql/053), and the next claim of the
// workspace admits it. The function queues ws on a Dispatcher of this process on that
// database, or else tells the configured Signal, as a commit does; without it the request
// waits for the dispatchers' next discovery.
//
// The wake-ups of one workspace are coalesced: at most one every TaskEndedGap, a later end
// waking it at the gap's end. Each wake-up costs the workspace a dispatcher round (a refill
// and a claim statement); one per task's end made a busy workspace's rounds as many as its
// jobs, each admitting a job or two. The slots' buffer (FAIR_SHARE_SLOTS beyond the
// workers) covers the gap many times over.
func (p *EventPublisher) TaskEnded(pool *pgxpool.Pool) func(ws uuid.UUID) {
	db := pool.Config().ConnConfig.Database
	wake := func(ws uuid.UUID) {
		if !wakeLocal(db, ws) && p.cfg.Signal != nil {
			p.cfg.Signal.Signal(ws)
		}
	}
	c := &coalescer{gap: TaskEndedGap, last: map[uuid.UUID]time.Time{}, due: map[uuid.UUID]bool{}, wake: wake}
	return c.call
}

// TaskEndedGap is the least time between two wake-ups of one workspace by TaskEnded.
const TaskEndedGap = 20 * time.Millisecond

// coalescer calls wake for a workspace at most once per gap: a call within the gap of the
// last one schedules one at its end (once).
type coalescer struct {
	gap  time.Duration
	mu   sync.Mutex
	last map[uuid.UUID]time.Time
	due  map[uuid.UUID]bool
	wake func(uuid.UUID)
}

// coalescerMax bounds the workspaces a coalescer remembers.
const coalescerMax = 4096

func (c *coalescer) call(ws uuid.UUID) {
	now := time.Now()
	c.mu.Lock()
	if c.due[ws] {
		c.mu.Unlock()
		return
	}
	if since := now.Sub(c.last[ws]); since < c.gap {
		c.due[ws] = true
		c.mu.Unlock()
		time.AfterFunc(c.gap-since, func() {
			c.mu.Lock()
			delete(c.due, ws)
			c.last[ws] = time.Now()
			c.mu.Unlock()
			c.wake(ws)
		})
		return
	}
	if len(c.last) >= coalescerMax {
		// Forget every workspace's last wake-up: the next call of each wakes at once, and
		// the map is walked once per coalescerMax workspaces, not at every call.
		clear(c.last)
	}
	c.last[ws] = now
	c.mu.Unlock()
	c.wake(ws)
}

// connDatabases caches the database name of connections: pgx's Conn.Config copies the whole
// configuration on every call. A cached connection cannot be collected, so its address is
// never another connection's; the cache is emptied when it grows past connDatabasesMax.
var connDatabases struct {
	sync.Mutex
	m map[*pgx.Conn]string
}

const connDatabasesMax = 4096

// databaseOf returns the database conn is connected to.
func databaseOf(conn *pgx.Conn) string {
	connDatabases.Lock()
	db, ok := connDatabases.m[conn]
	connDatabases.Unlock()
	if ok {
		return db
	}
	db = conn.Config().Database
	connDatabases.Lock()
	if connDatabases.m == nil || len(connDatabases.m) >= connDatabasesMax {
		connDatabases.m = make(map[*pgx.Conn]string)
	}
	connDatabases.m[conn] = db
	connDatabases.Unlock()
	return db
}

// EventBus returns a watermill cqrs.EventBus bound to the transaction in ctx: what Publish
// uses, for callers that want watermill's API. Its rows are written with the transaction's
// COMMIT (see atCommit). It must not outlive the transaction.
func (p *EventPublisher) EventBus(ctx context.Context) (*cqrs.EventBus, error) {
	_, scope, err := postgres.TxFromContext(ctx)
	if err != nil {
		return nil, err
	}
	if scope.WorkspaceID == uuid.Nil {
		return nil, errors.New("outbox: transaction has no workspace scope")
	}
	sqlPub, err := wsql.NewPublisher(atCommit{ctx: ctx}, wsql.PublisherConfig{
		SchemaAdapter: SchemaAdapter{WorkspaceID: scope.WorkspaceID},
	}, p.cfg.Logger)
	if err != nil {
		return nil, err
	}
	fwd := forwarder.NewPublisher(sqlPub, forwarder.PublisherConfig{ForwarderTopic: forwarderTopic})
	return cqrs.NewEventBusWithConfig(fwd, cqrs.EventBusConfig{
		GeneratePublishTopic: func(params cqrs.GenerateEventPublishTopicParams) (string, error) {
			return p.cfg.Routes.Destination(params.EventName)
		},
		OnPublish: func(params cqrs.OnEventSendParams) error {
			msg := params.Message
			md := MetadataFromContext(msg.Context())
			for k, v := range md {
				msg.Metadata.Set(k, v)
			}
			// The forwarder's envelope keeps this context: SchemaAdapter reads the row's
			// fields from the message itself instead of decoding the envelope's JSON.
			dest, err := p.cfg.Routes.Destination(params.EventName)
			if err != nil {
				return err
			}
			msg.SetContext(context.WithValue(msg.Context(), wrappedKey{}, &wrapped{msg: msg, dest: dest}))
			return nil
		},
		Marshaler: EventMarshaler{},
		Logger:    p.cfg.Logger,
	})
}

// atCommit is the watermill-sql executor of EventBus: each insert the publisher builds is
// queued on the transaction of ctx with postgres.BeforeCommitWrite, so it travels to the
// server in the COMMIT's round trip (every event of a transaction, however many Publish
// calls, costs no round trip of its own), and may be one statement with the other writes
// queued for the COMMIT (the task's and the operation's updates of a worker's step). A failing insert (a duplicate event id, a row outside the
// transaction's workspace) fails the COMMIT: the transaction rolls back, and its owner gets
// the error from the commit instead of from Publish. The rows are therefore not visible
// inside their own transaction; nothing reads them there (the dispatcher reads committed
// rows only).
type atCommit struct{ ctx context.Context }

func (e atCommit) ExecContext(_ context.Context, query string, args ...any) (wsql.Result, error) {
	onErr := func(err error) error { return fmt.Errorf("outbox.EventPublisher.Publish: %w", err) }
	if n := len(args); n > 0 && n%insertColumns == 0 && query == insertRows.SQL(n/insertColumns) {
		// Rows of insertRows (SchemaAdapter's): with the other events queued in the
		// transaction's scope, one statement.
		return queuedResult{}, postgres.BeforeCommitRows(e.ctx, insertRows, onErr, args...)
	}
	return queuedResult{}, postgres.BeforeCommitWrite(e.ctx, "outbox_events", onErr, query, args...)
}

func (atCommit) QueryContext(context.Context, string, ...any) (wsql.Rows, error) {
	return nil, errPublishOnly
}

// queuedResult is the result of a queued insert: its rows are not known until the commit.
type queuedResult struct{}

func (queuedResult) RowsAffected() (int64, error) {
	return 0, errors.New("outbox: the insert runs with the commit")
}

// EventMarshaler is the cqrs marshaler of domain events: payload = JSON of the event,
// UUID = the event's own id (IdentifiedEvent) or a new UUIDv7, name = EventType().
type EventMarshaler struct{}

var _ cqrs.CommandEventMarshaler = EventMarshaler{}

// Marshal implements cqrs.CommandEventMarshaler.
func (EventMarshaler) Marshal(v any) (*message.Message, error) {
	ev, ok := v.(domain.Event)
	if !ok {
		return nil, fmt.Errorf("outbox: %T is not a domain.Event", v)
	}
	payload, err := json.Marshal(ev)
	if err != nil {
		return nil, fmt.Errorf("outbox: marshal %s: %w", ev.EventType(), err)
	}
	id := uuid.Nil
	if ie, ok := ev.(IdentifiedEvent); ok {
		id = ie.EventID()
	}
	if id == uuid.Nil {
		id = domain.NewID()
	}
	msg := message.NewMessage(id.String(), payload)
	msg.Metadata.Set(MetadataEventType, ev.EventType())
	msg.Metadata.Set(MetadataAggregateType, ev.AggregateType())
	msg.Metadata.Set(MetadataAggregateID, ev.AggregateID())
	msg.Metadata.Set(MetadataOccurredAt, time.Now().UTC().Format(time.RFC3339Nano))
	return msg, nil
}

// Unmarshal implements cqrs.CommandEventMarshaler.
func (EventMarshaler) Unmarshal(msg *message.Message, v any) error {
	return json.Unmarshal(msg.Payload, v)
}

// Name implements cqrs.CommandEventMarshaler.
func (EventMarshaler) Name(v any) string {
	if ev, ok := v.(domain.Event); ok {
		return ev.EventType()
	}
	return cqrs.FullyQualifiedStructName(v)
}

// NameFromMessage implements cqrs.CommandEventMarshaler.
func (EventMarshaler) NameFromMessage(msg *message.Message) string {
	return msg.Metadata.Get(MetadataEventType)
}

type metadataKey struct{}

// WithCorrelationID returns ctx carrying a correlation id that Publish records in the
// metadata of every event (and the dispatcher forwards in the job data).
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return withMetadata(ctx, MetadataCorrelationID, id)
}

// WithTraceContext returns ctx carrying W3C trace context (traceparent, tracestate) that
// Publish records beside each event.
func WithTraceContext(ctx context.Context, traceparent, tracestate string) context.Context {
	ctx = withMetadata(ctx, MetadataTraceParent, traceparent)
	return withMetadata(ctx, MetadataTraceState, tracestate)
}

func withMetadata(ctx context.Context, k, v string) context.Context {
	if v == "" {
		return ctx
	}
	old := MetadataFromContext(ctx)
	md := make(map[string]string, len(old)+1)
	for ok, ov := range old {
		md[ok] = ov
	}
	md[k] = v
	return context.WithValue(ctx, metadataKey{}, md)
}

// MetadataFromContext returns the correlation and trace metadata carried by ctx (never nil).
func MetadataFromContext(ctx context.Context) map[string]string {
	if ctx == nil {
		return map[string]string{}
	}
	md, _ := ctx.Value(metadataKey{}).(map[string]string)
	if md == nil {
		return map[string]string{}
	}
	return md
}

// SchemaAdapter is the watermill-sql SchemaAdapter of outbox_events, for publishing only. It
// accepts messages wrapped by watermill's forwarder (topic "outbox_events"): the envelope's
// UUID becomes outbox_events.id, its destination topic the destination, and its metadata the
// event type and aggregate. WorkspaceID is the RLS scope of the transaction; the row policy
// refuses any other. The subscriber side is not supported: the Dispatcher reads the table.
type SchemaAdapter struct {
	WorkspaceID uuid.UUID
}

var _ wsql.SchemaAdapter = SchemaAdapter{}

// envelope mirrors the JSON of watermill's forwarder envelope.
type envelope struct {
	DestinationTopic string            `json:"destination_topic"`
	UUID             string            `json:"uuid"`
	Payload          []byte            `json:"payload"`
	Metadata         map[string]string `json:"metadata"`
}

// InsertQuery implements wsql.SchemaAdapter.
func (a SchemaAdapter) InsertQuery(params wsql.InsertQueryParams) (wsql.Query, error) {
	if params.Topic != forwarderTopic {
		return wsql.Query{}, fmt.Errorf("outbox: SchemaAdapter takes forwarder envelopes on topic %q, got %q", forwarderTopic, params.Topic)
	}
	if a.WorkspaceID == uuid.Nil {
		return wsql.Query{}, errors.New("outbox: SchemaAdapter has no workspace")
	}
	if len(params.Msgs) == 0 {
		return wsql.Query{}, errors.New("outbox: no messages")
	}
	args := make([]any, 0, insertColumns*len(params.Msgs))
	for _, m := range params.Msgs {
		env, trusted, err := unwrap(m)
		if err != nil {
			return wsql.Query{}, err
		}
		id, err := uuid.Parse(env.UUID)
		if err != nil {
			return wsql.Query{}, fmt.Errorf("outbox: event id %q is not a UUID: %w", env.UUID, err)
		}
		eventType := env.Metadata[MetadataEventType]
		if eventType == "" || env.DestinationTopic == "" {
			return wsql.Query{}, fmt.Errorf("outbox: event %s lacks an event type or destination", id)
		}
		if !trusted && !json.Valid(env.Payload) {
			return wsql.Query{}, fmt.Errorf("outbox: event %s payload is not JSON", id)
		}
		// The row's columns hold the event type and the aggregate: the stored metadata does
		// not repeat them (rowMetadataKey).
		md := appendMetadataJSON(nil, env.Metadata)
		args = append(args, id, a.WorkspaceID, eventType, env.DestinationTopic,
			env.Metadata[MetadataAggregateType], env.Metadata[MetadataAggregateID], string(env.Payload), string(md))
	}
	return wsql.Query{Query: insertRows.SQL(len(params.Msgs)), Args: args}, nil
}

// insertRows is the insert of outbox rows, insertColumns parameters a row (the payload and
// metadata as JSON text).
var insertRows = postgres.NewRowsWrite("outbox_events", insertColumns, func(rows int) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type, aggregate_id, event_payload, metadata) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		for f := 1; f <= insertColumns; f++ {
			switch f {
			case 1:
				b.WriteString("($")
			case insertColumns:
				b.WriteString("::jsonb, $")
			default:
				b.WriteString(", $")
			}
			b.WriteString(strconv.Itoa(i*insertColumns + f))
		}
		b.WriteString("::jsonb)")
	}
	return b.String()
})

const insertColumns = 8

// wrappedKey is the context key of the message EventBus hands to the forwarder (see
// wrapped).
type wrappedKey struct{}

// wrapped is the message an EventBus of EventPublisher published, and its destination: the
// forwarder wraps it in an envelope (JSON, its payload in base64) whose message keeps the
// context, so SchemaAdapter reads the fields here instead of decoding the envelope.
type wrapped struct {
	msg  *message.Message
	dest string
}

// unwrap returns the forwarder envelope of m: from the message EventBus published when m's
// context carries it and m's envelope starts with its destination and id (trusted: its
// payload is the JSON EventMarshaler wrote), else decoded from m's payload.
func unwrap(m *message.Message) (env envelope, trusted bool, err error) {
	if w, ok := m.Context().Value(wrappedKey{}).(*wrapped); ok && w.msg != nil && envelopeOf(m.Payload, w) {
		return envelope{DestinationTopic: w.dest, UUID: w.msg.UUID, Payload: w.msg.Payload, Metadata: w.msg.Metadata}, true, nil
	}
	if err := json.Unmarshal(m.Payload, &env); err != nil {
		return envelope{}, false, fmt.Errorf("outbox: message %s is not a forwarder envelope: %w", m.UUID, err)
	}
	return env, false, nil
}

// envelopeOf reports whether payload, a forwarder envelope as json.Marshal writes it
// (fields in declaration order), starts with w's destination and id.
func envelopeOf(payload []byte, w *wrapped) bool {
	var buf [160]byte
	b := append(buf[:0], `{"destination_topic":`...)
	b = appendJSONString(b, w.dest)
	b = append(b, `,"uuid":`...)
	b = appendJSONString(b, w.msg.UUID)
	b = append(b, ',')
	return bytes.HasPrefix(payload, b)
}

// rowMetadataKey reports whether metadata key k is stored on an outbox row: not the ones
// the row's columns hold (event_type, aggregate_type, aggregate_id; the dispatcher sets
// them on the delivered message from the columns). Leaving them out saves about 100 B a
// row, written twice per event (the live row and the log's).
func rowMetadataKey(k string) bool {
	return k != MetadataEventType && k != MetadataAggregateType && k != MetadataAggregateID
}

// appendMetadataJSON appends md's row keys (rowMetadataKey) as a JSON object, keys sorted
// (what json.Marshal writes, without its reflection).
func appendMetadataJSON(b []byte, md map[string]string) []byte {
	var buf [16]string
	keys := buf[:0]
	size := 2
	for k, v := range md {
		if !rowMetadataKey(k) {
			continue
		}
		keys = append(keys, k)
		size += len(k) + len(v) + 6
	}
	slices.Sort(keys)
	b = slices.Grow(b, size)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, md[k])
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes U+FFFD, as
// json.Marshal writes it.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}

var errPublishOnly = errors.New("outbox: SchemaAdapter is publish-only; the Dispatcher reads outbox_events")

// SelectQuery implements wsql.SchemaAdapter; it always fails (publish-only).
func (SchemaAdapter) SelectQuery(wsql.SelectQueryParams) (wsql.Query, error) {
	return wsql.Query{}, errPublishOnly
}

// UnmarshalMessage implements wsql.SchemaAdapter; it always fails (publish-only).
func (SchemaAdapter) UnmarshalMessage(wsql.UnmarshalMessageParams) (wsql.Row, error) {
	return wsql.Row{}, errPublishOnly
}

// SchemaInitializingQueries implements wsql.SchemaAdapter: the schema is migrated by
// sql/001 and sql/003, never created at publish time.
func (SchemaAdapter) SchemaInitializingQueries(wsql.SchemaInitializingQueriesParams) ([]wsql.Query, error) {
	return nil, nil
}

// SubscribeIsolationLevel implements wsql.SchemaAdapter: READ COMMITTED (watermill-sql maps
// LevelDefault to SERIALIZABLE for pgx).
func (SchemaAdapter) SubscribeIsolationLevel() stdsql.IsolationLevel {
	return stdsql.LevelReadCommitted
}
