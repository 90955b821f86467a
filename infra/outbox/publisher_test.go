package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

func TestPublishWritesOutboxRowInTransaction(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ctx := context.Background()
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)

	ev := testHappened{ID: uuid.New(), ThingID: "thing-1", Version: 3}
	pctx := WithTraceContext(WithCorrelationID(ctx, "corr-1"), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "k=v")
	require.NoError(t, postgres.InTx(pctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		return pub.Publish(ctx, ev)
	}))

	var (
		gotWS                        uuid.UUID
		eventType, dest, aggT, aggID string
		payload                      map[string]any
		md                           map[string]string
		status                       string
	)
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT workspace_id, event_type, destination, aggregate_type, aggregate_id,
		event_payload, metadata, status FROM outbox_events WHERE id = $1`, ev.ID).
		Scan(&gotWS, &eventType, &dest, &aggT, &aggID, &payload, &md, &status))
	require.Equal(t, ws, gotWS)
	require.Equal(t, "test.happened", eventType)
	require.Equal(t, testQueue, dest)
	require.Equal(t, "thing", aggT)
	require.Equal(t, "thing-1", aggID)
	require.Equal(t, map[string]any{"thing_id": "thing-1", "version": float64(3)}, payload)
	require.Equal(t, "corr-1", md[MetadataCorrelationID])
	require.Equal(t, "k=v", md[MetadataTraceState])
	require.Contains(t, md[MetadataTraceParent], "0af7651916cd43dd8448eb211c80319c")
	// The columns hold the event type and the aggregate; the metadata does not repeat them.
	require.NotContains(t, md, MetadataEventType)
	require.NotContains(t, md, MetadataAggregateType)
	require.NotContains(t, md, MetadataAggregateID)
	require.Contains(t, md, MetadataOccurredAt)
	require.Equal(t, StatusPending, status)

	// Events without their own id get a fresh UUID; several per call.
	require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		return pub.Publish(ctx, noIDEvent{ThingID: "a"}, noIDEvent{ThingID: "b"})
	}))
	require.Equal(t, 3, statusCounts(t, db)[StatusPending])
}

type noIDEvent struct {
	ThingID string `json:"thing_id"`
}

func (e noIDEvent) EventType() string     { return "test.happened" }
func (e noIDEvent) AggregateType() string { return "thing" }
func (e noIDEvent) AggregateID() string   { return e.ThingID }

type unroutedEvent struct{ noIDEvent }

func (unroutedEvent) EventType() string { return "test.nowhere" }

func TestPublishRefusesWithoutTransactionScopeOrRoute(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ctx := context.Background()
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)

	// No transaction.
	require.ErrorIs(t, pub.Publish(ctx, noIDEvent{ThingID: "a"}), postgres.ErrNoTx)
	// A transaction without a workspace scope.
	err = postgres.InTx(ctx, db.App, postgres.Scope{}, func(ctx context.Context, _ pgx.Tx) error {
		return pub.Publish(ctx, noIDEvent{ThingID: "a"})
	})
	require.ErrorContains(t, err, "no workspace scope")
	// Unknown event type: error, and the transaction rolls back everything.
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		if err := pub.Publish(ctx, noIDEvent{ThingID: "ok"}); err != nil {
			return err
		}
		return pub.Publish(ctx, unroutedEvent{})
	})
	require.ErrorIs(t, err, ErrUnroutable)
	// A business rollback takes the events with it.
	boom := errors.New("business failure")
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, _ pgx.Tx) error {
		if err := pub.Publish(ctx, noIDEvent{ThingID: "ok"}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, statusCounts(t, db))
}

// TestPublishedRowsTravelWithTheCommit: the inserts are queued on the transaction and sent
// with its COMMIT, all of a transaction's events in that one round trip; an insert the
// server refuses fails the commit, and the transaction's other writes roll back with it.
func TestPublishedRowsTravelWithTheCommit(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ws := createWorkspace(t, db)
	ctx := context.Background()
	pub, err := NewEventPublisher(PublisherConfig{Routes: testRoutes})
	require.NoError(t, err)

	// Not written before the commit: the transaction does not see its own events.
	var inside int
	require.NoError(t, postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		if err := pub.Publish(ctx, noIDEvent{ThingID: "a"}); err != nil {
			return err
		}
		if err := pub.Publish(ctx, noIDEvent{ThingID: "b"}, noIDEvent{ThingID: "c"}); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&inside)
	}))
	require.Zero(t, inside)
	require.Equal(t, 3, statusCounts(t, db)[StatusPending])

	// A duplicate event id fails the commit: the operation written before it rolls back too.
	dup := testHappened{ID: uuid.New(), ThingID: "dup"}
	opID := uuid.New()
	err = postgres.InTx(ctx, db.App, postgres.Scope{WorkspaceID: ws}, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id, status)
			VALUES ($1, $2, 'test', 'thing', $1, 'pending')`, opID, ws); err != nil {
			return err
		}
		if err := pub.Publish(ctx, dup); err != nil {
			return err
		}
		return pub.Publish(ctx, dup)
	})
	require.ErrorContains(t, err, "outbox.EventPublisher.Publish")
	require.ErrorIs(t, err, domain.ErrConflict)
	require.Equal(t, 3, statusCounts(t, db)[StatusPending])
	var ops int
	require.NoError(t, db.Owner.QueryRow(ctx, `SELECT count(*) FROM operations WHERE id = $1`, opID).Scan(&ops))
	require.Zero(t, ops)
}

// --- payload contract (domain.Event): no field of any event type may hold a secret ---

// forbiddenField matches field names and JSON keys that could hold a credential, cookie,
// password, token, secret, API key, presigned URL or storage/object key.
var forbiddenField = regexp.MustCompile(`(?i)(credential|cookie|passw|pwd|secret|token|api_?key|apikey|access_?key|private_?key|presign|signed_?url|signature|storage_?key|object_?key|s3_?key|bucket_?key|session|authorization|bearer)`)

// benignSuffix marks names that only identify, version or count the sensitive thing
// (credentials_version, token_id): IDs and versions are what payloads are for.
var benignSuffix = regexp.MustCompile(`(?i)(_?id|_?ids|_?version|_?count|_?at|_?kind|_?type|_?status)$`)

func forbiddenName(name string) bool {
	return name != "" && forbiddenField.MatchString(name) && !benignSuffix.MatchString(name)
}

// fieldViolations walks t's fields recursively (structs, pointers, slices, arrays, maps)
// and returns the paths whose Go name or JSON key matches forbiddenField.
func fieldViolations(t reflect.Type) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			if t.Kind() == reflect.Map {
				if forbiddenName(t.Key().Name()) {
					out = append(out, path+"[key]")
				}
			}
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			key := strings.Split(f.Tag.Get("json"), ",")[0]
			p := path + "." + f.Name
			if forbiddenName(f.Name) || forbiddenName(key) {
				out = append(out, p)
			}
			walk(f.Type, p)
		}
	}
	walk(t, t.String())
	return out
}

// Bad test events: the check must catch them.
type badNestedEvent struct {
	noIDEvent
	Store struct {
		ID   string `json:"id"`
		Auth struct {
			Key string `json:"api_key"`
		} `json:"auth"`
	} `json:"store"`
}

func (badNestedEvent) EventType() string { return "test.bad_nested" }

type badSliceEvent struct {
	noIDEvent
	Media []struct {
		ID      string `json:"id"`
		TokenID string `json:"token_id"` // benign: an id
		Link    string `json:"presigned_url"`
	} `json:"media"`
}

func (badSliceEvent) EventType() string { return "test.bad_slice" }

type badNameEvent struct {
	noIDEvent
	ObjectKey string
}

func (badNameEvent) EventType() string { return "test.bad_name" }

func init() {
	domain.RegisterEvent(testHappened{})
	domain.RegisterEvent(badNestedEvent{})
	domain.RegisterEvent(badSliceEvent{})
	domain.RegisterEvent(badNameEvent{})
}

func TestEventPayloadsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	// The deliberately bad events registered by this test file, and what must be found.
	wantBad := map[string]string{
		"test.bad_nested": "Auth.Key",
		"test.bad_slice":  "Media.Link",
		"test.bad_name":   "ObjectKey",
	}
	events := domain.RegisteredEvents()
	require.NotEmpty(t, events)
	found := map[string]bool{}
	checked := map[string]bool{}
	for _, ev := range events {
		checked[ev.EventType()] = true
		v := fieldViolations(reflect.TypeOf(ev))
		if want, ok := wantBad[ev.EventType()]; ok {
			require.NotEmpty(t, v, "%s: the check missed a forbidden field", ev.EventType())
			require.Contains(t, strings.Join(v, " "), want)
			found[ev.EventType()] = true
			continue
		}
		require.Empty(t, v, "event %s (%T) has fields that could hold a secret", ev.EventType(), ev)
		// The sample must also marshal to a JSON object (it becomes event_payload).
		b, err := json.Marshal(ev)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(b), "{"), "%s must marshal to a JSON object", ev.EventType())
	}
	require.Len(t, found, len(wantBad), "the bad test events must be in the registry")
	// Integration events leave the service (docs/events.md): each is checked like the others.
	require.NotEmpty(t, domain.IntegrationEvents())
	for _, ie := range domain.IntegrationEvents() {
		require.True(t, checked[ie.Sample.EventType()], "integration event %s is not checked", ie.Sample.EventType())
	}
}
