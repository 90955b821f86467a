// Package workertest is the shared fixture of the job handler tests (app/worker/...): an
// isolated, migrated database with one workspace and its owner, and worker.Deps wired to the
// real transactor, operations repository and outbox publisher, as cmd/app wires them.
//
// A handler test builds its Env with New, seeds what its flow needs (InTx for the rows the
// command would have written, InsertTask for the operation and its task), builds the job the
// outbox would deliver (Job), runs the handler and asserts on what the database holds
// (Load, Operation, StatusEvents, CountOutbox, Count) and on the logs (Logs).
//
// Every helper fails the test on error; none of them is safe to call after the test ended.
package workertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/port"
	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/outbox"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
)

// Env is one test's world.
type Env struct {
	// DB is the test's own database (pgtest.New): App is RLS-bound, Owner is not (setup and
	// assertions only).
	DB *pgtest.DB
	// Workspace and User are a seeded workspace and a user who owns it.
	Workspace, User uuid.UUID
	// Logs receives what Log writes.
	Logs *LogBuffer
	// Log writes JSON lines at debug level into Logs.
	Log *slog.Logger
	// Deps are the handlers' dependencies: Tx is a postgres.Transactor on DB.App,
	// Operations the postgres operations repository, Events the real outbox publisher
	// (routed by anyRoute), Now time.Now and Log the Env's Log. Copy and change a field
	// (e.g. wrap Tx) to give a handler other dependencies.
	Deps worker.Deps
}

// New creates the database (skipping t under -short), seeds a workspace and its owner and
// wires Deps.
func New(t testing.TB) *Env {
	t.Helper()
	db := pgtest.New(t)
	ctx := context.Background()
	e := &Env{DB: db, Workspace: uuid.New(), User: uuid.New(), Logs: &LogBuffer{}}
	_, err := db.Owner.Exec(ctx, `
		WITH u AS (INSERT INTO users (id, email, password_hash) VALUES ($2, $3, 'x')),
		     w AS (INSERT INTO workspaces (id, name) VALUES ($1, 'ws'))
		SELECT 1`, e.Workspace, e.User, e.User.String()+"@example.test")
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`,
		e.Workspace, e.User)
	require.NoError(t, err)

	e.Log = slog.New(slog.NewJSONHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	events, err := outbox.NewEventPublisher(outbox.PublisherConfig{Routes: anyRoute{}})
	require.NoError(t, err)
	e.Deps = worker.Deps{Tx: postgres.Transactor{Pool: db.App}, Operations: postgres.NewOperations(), Events: events,
		Now: time.Now, Log: e.Log}
	return e
}

// InTx runs fn in one RLS transaction of the workspace, as its owner, and fails t when it
// returns an error.
func (e *Env) InTx(t testing.TB, fn func(ctx context.Context) error) {
	t.Helper()
	require.NoError(t, postgres.Transactor{Pool: e.DB.App}.InTx(context.Background(), e.Workspace, e.User, fn))
}

// InsertTask inserts op and then task (through tasks) in one transaction of the workspace,
// as the command that requests the task does. Rows the task refers to (a store, a product,
// a media) must be there already.
func InsertTask[T any](t testing.TB, e *Env, tasks port.Repository[T], op domain.Operation, task T) {
	t.Helper()
	e.InTx(t, func(ctx context.Context) error {
		if err := e.Deps.Operations.Insert(ctx, op); err != nil {
			return err
		}
		return tasks.Insert(ctx, task)
	})
}

// Load reads the row id through repo in a transaction of the workspace.
func Load[T any](t testing.TB, e *Env, repo port.Repository[T], id uuid.UUID) T {
	t.Helper()
	var v T
	e.InTx(t, func(ctx context.Context) error {
		var err error
		v, err = repo.Get(ctx, id)
		return err
	})
	return v
}

// Operation reads the operation id.
func (e *Env) Operation(t testing.TB, id uuid.UUID) domain.Operation {
	t.Helper()
	return Load(t, e, e.Deps.Operations, id)
}

// Job returns the delivery of ev the outbox would make to the workspace's workers: its ID
// is fixed by the event's type and aggregate, so two calls give the same job.
func (e *Env) Job(t testing.TB, ev domain.Event, attempt int, last bool) worker.Job {
	t.Helper()
	raw, err := json.Marshal(ev)
	require.NoError(t, err)
	return worker.Job{ID: "evt-" + ev.EventType() + "-" + ev.AggregateID(), WorkspaceID: e.Workspace,
		EventType: ev.EventType(), Payload: raw, Attempt: attempt, LastAttempt: last}
}

// StatusEvents returns the statuses of the operation's operation.status_changed outbox rows,
// oldest first. It fails the test when a finish's started_at disagrees with its version: an
// operation that started (running, version 2, published by no event) finishes at version 3
// with started_at; one that never started finishes at version 2 without.
func (e *Env) StatusEvents(t testing.TB, opID uuid.UUID) []string {
	t.Helper()
	rows, err := e.DB.Owner.Query(context.Background(), `SELECT event_payload->>'status', (event_payload->>'version')::int,
		event_payload ? 'started_at' FROM outbox_all_events
		WHERE event_type = 'operation.status_changed' AND aggregate_id = $1
		ORDER BY created_at, (event_payload->>'version')::int`, opID.String())
	require.NoError(t, err)
	var out []string
	for rows.Next() {
		var status string
		var version int
		var started bool
		require.NoError(t, rows.Scan(&status, &version, &started))
		if domain.OperationStatus(status).Terminal() {
			require.Equal(t, version > 2, started, "%s at version %d: started_at present = %v", status, version, started)
		} else {
			require.False(t, started, "%s event with started_at", status)
		}
		out = append(out, status)
	}
	require.NoError(t, rows.Err())
	return out
}

// CountOutbox counts the outbox rows of eventType about the aggregate aggregateID.
func (e *Env) CountOutbox(t testing.TB, eventType string, aggregateID uuid.UUID) int {
	t.Helper()
	return e.Count(t, `SELECT count(*) FROM outbox_all_events WHERE event_type = $1 AND aggregate_id = $2`,
		eventType, aggregateID.String())
}

// Count runs a SELECT count(*) query as the database owner (RLS does not apply).
func (e *Env) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, e.DB.Owner.QueryRow(context.Background(), query, args...).Scan(&n))
	return n
}

// Seal seals credentials made of apiKey for the workspace's store storeID with c, as the
// command that sets a store's credentials does.
func (e *Env) Seal(t testing.TB, c port.CredentialCipher, storeID uuid.UUID, apiKey string) port.SealedCredentials {
	t.Helper()
	creds, err := port.NewCredentials(apiKey)
	require.NoError(t, err)
	plain, err := creds.SecretJSON()
	require.NoError(t, err)
	sealed, keyID, err := c.Seal(plain, port.CredentialsAD(e.Workspace, storeID))
	require.NoError(t, err)
	return port.SealedCredentials{Ciphertext: sealed, KeyID: keyID}
}

// LogBuffer is a log sink safe for concurrent writers.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// ErrCrash is what a FlakyTx returns for the step it fails.
var ErrCrash = errors.New("simulated crash: the step did not run")

// FlakyTx fails its FailAt-th InTx call (from 1) without running it, and the Times-1 calls
// after it (Times 0 counts as 1): a lost database connection at that step, or, with Times
// beyond the engine's record retries (CrashTimes), a crash there. FailAt 0 never fails.
// Give it to a handler through a copy of Env.Deps.
type FlakyTx struct {
	port.Transactor
	FailAt int64
	Times  int64
	calls  atomic.Int64
}

// CrashTimes is a FlakyTx.Times that fails a step and every retry the engine makes of it in
// the same delivery (worker.RecordRetries), as a crash of the worker at that step would.
const CrashTimes = worker.RecordRetries + 1

// InTx implements port.Transactor.
func (f *FlakyTx) InTx(ctx context.Context, ws, user uuid.UUID, fn func(ctx context.Context) error) error {
	if n := f.calls.Add(1); f.FailAt > 0 && n >= f.FailAt && n < f.FailAt+max(f.Times, 1) {
		return ErrCrash
	}
	return f.Transactor.InTx(ctx, ws, user, fn)
}

// anyRoute routes an integration event to worker.StreamEvents and any other event to a
// destination named after its type. A worker test dispatches nothing, and the registry of
// the flows (app/worker/flows) imports the flows under test, so their queues are not known
// here.
type anyRoute struct{}

// Destination implements outbox.Router.
func (anyRoute) Destination(eventType string) (string, error) {
	for _, e := range domain.IntegrationEvents() {
		if e.Sample.EventType() == eventType {
			return worker.StreamEvents, nil
		}
	}
	return "test:" + eventType, nil
}
