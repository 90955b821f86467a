package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/bus"
	"github.com/listingkit/listing/domain"
	"github.com/listingkit/listing/infra/idem"
	"github.com/listingkit/listing/infra/postgres"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/testwait"
)

// createOp is the test command: it records one row in operations whose resource_id is
// Resource, so that executions can be counted in the database.
type createOp struct {
	Resource uuid.UUID
	Title    string
}

func (createOp) CommandName() string { return "test.create_op" }

type opResult struct {
	OperationID uuid.UUID `json:"id"`
	Resource    uuid.UUID `json:"resource_id"`
}

// insertOp inserts the operations row of cmd in the context's transaction.
func insertOp(ctx context.Context, cmd createOp) (opResult, error) {
	tx, scope, err := postgres.TxFromContext(ctx)
	if err != nil {
		return opResult{}, err
	}
	id := uuid.New()
	_, err = tx.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, resource_type, resource_id, created_by)
		VALUES ($1, $2, 'test.create_op', 'test', $3, $4)`, id, scope.WorkspaceID, cmd.Resource, scope.UserID)
	if err != nil {
		return opResult{}, postgres.TranslateError(err)
	}
	return opResult{OperationID: id, Resource: cmd.Resource}, nil
}

// renderOp renders like an HTTP handler would: 202, JSON, a Location, and a header that must
// not be stored.
func renderOp(result any) (bus.Response, error) {
	r := result.(opResult)
	body, err := json.Marshal(map[string]any{"operation": r})
	if err != nil {
		return bus.Response{}, err
	}
	return bus.Response{Status: http.StatusAccepted, Body: body, Header: map[string]string{
		"Content-Type": "application/json",
		"location":     "/v1/operations/" + r.OperationID.String(),
		"X-Debug":      "not stored",
	}}, nil
}

type bundle struct {
	db    *pgtest.DB
	ws    uuid.UUID
	user  uuid.UUID
	keys  []idem.Key
	guard *idem.Guard
	bus   *bus.Bus
	reg   *prometheus.Registry
	calls atomic.Int64
}

func testKey(id string, b byte) idem.Key {
	return idem.Key{ID: id, Secret: bytes.Repeat([]byte{b}, 32)}
}

// setup creates a database, a workspace with a member, and a bus
// TxMiddleware(db.App, guard.Opening) → idem middleware → handler, as the service chains them.
func setup(t *testing.T) *bundle {
	t.Helper()
	db := pgtest.New(t)
	b := &bundle{db: db, keys: []idem.Key{testKey("k1", 1)}, reg: prometheus.NewRegistry()}
	b.ws, b.user = seedWorkspace(t, db)
	b.guard, b.bus = b.newBus(t, b.keys)
	return b
}

func (b *bundle) newBus(t testing.TB, keys []idem.Key) (*idem.Guard, *bus.Bus) {
	t.Helper()
	m, err := idem.NewMetrics(b.reg)
	require.NoError(t, err)
	g, err := idem.New(idem.NewStore(), idem.Config{Keys: keys, Metrics: m, RetryAfter: 2 * time.Second})
	require.NoError(t, err)
	return g, bus.New(postgres.TxMiddleware(b.db.App, g.Opening), g.Middleware())
}

func seedWorkspace(t testing.TB, db *pgtest.DB) (ws, user uuid.UUID) {
	t.Helper()
	ws, user = uuid.New(), uuid.New()
	seedUser(t, db, user)
	addWorkspace(t, db, ws, user)
	return ws, user
}

func seedUser(t testing.TB, db *pgtest.DB, user uuid.UUID) {
	t.Helper()
	_, err := db.Owner.Exec(context.Background(),
		`INSERT INTO users (id, email, password_hash) VALUES ($1, $2, 'x')`, user, user.String()+"@example.test")
	require.NoError(t, err)
}

func addWorkspace(t testing.TB, db *pgtest.DB, ws, user uuid.UUID) {
	t.Helper()
	ctx := context.Background()
	_, err := db.Owner.Exec(ctx, `INSERT INTO workspaces (id, name) VALUES ($1, 'ws') ON CONFLICT DO NOTHING`, ws)
	require.NoError(t, err)
	_, err = db.Owner.Exec(ctx, `INSERT INTO workspace_memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, ws, user)
	require.NoError(t, err)
}

// req builds an idempotent request: POST /v1/workspaces/{ws}/things with a JSON body.
type req struct {
	actor   bus.Actor
	key     uuid.UUID
	body    string
	path    string
	ifMatch string
	handler bus.Handler[createOp, opResult]
	cmd     createOp
}

func (b *bundle) req(key uuid.UUID, body string) req {
	return req{
		actor: bus.Actor{WorkspaceID: b.ws, UserID: b.user}, key: key, body: body,
		path: "/v1/workspaces/" + b.ws.String() + "/things",
		cmd:  createOp{Resource: key, Title: body},
	}
}

func (b *bundle) counting() bus.Handler[createOp, opResult] {
	return bus.HandlerFunc[createOp, opResult](func(ctx context.Context, cmd createOp) (opResult, error) {
		b.calls.Add(1)
		return insertOp(ctx, cmd)
	})
}

func (b *bundle) exec(ctx context.Context, r req) (bus.Reply[opResult], error) {
	return b.execOn(ctx, b.bus, r)
}

func (b *bundle) execOn(ctx context.Context, bs *bus.Bus, r req) (bus.Reply[opResult], error) {
	h := r.handler
	if h == nil {
		h = b.counting()
	}
	headers := map[string]string{"Content-Type": "application/json"}
	if r.ifMatch != "" {
		headers["If-Match"] = r.ifMatch
	}
	return bus.Execute(ctx, bs, h, bus.Request[createOp]{
		Command: r.cmd,
		Actor:   r.actor,
		Idempotency: &bus.Idempotency{
			Key: r.key, Method: http.MethodPost, Path: r.path,
			Fingerprint: bus.FingerprintInput{Body: []byte(r.body), Headers: headers},
			Render:      renderOp,
		},
	})
}

// countOps counts operations rows for a resource, as the owner (every workspace).
func countOps(t testing.TB, db *pgtest.DB, resource uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(),
		`SELECT count(*) FROM operations WHERE resource_id = $1`, resource).Scan(&n))
	return n
}

// countRecords counts idempotency records with a key, as the owner.
func countRecords(t testing.TB, db *pgtest.DB, key uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, db.Owner.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_requests WHERE idempotency_key = $1`, key).Scan(&n))
	return n
}

func requireCode(t testing.TB, err error, code string) *domain.Error {
	t.Helper()
	var de *domain.Error
	require.True(t, errors.As(err, &de), "want %s, got %v", code, err)
	require.Equal(t, code, de.Code, "%v", err)
	return de
}

// counter reads a counter of the registry, summed over labels.
func counter(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func TestReplayReturnsStoredResponseWithoutCallingHandler(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()

	first, err := b.exec(ctx, b.req(key, `{"title":"mug","price":12.50}`))
	require.NoError(t, err)
	require.False(t, first.Replayed)
	require.NotNil(t, first.Response)
	require.Equal(t, http.StatusAccepted, first.Response.Status)
	require.Equal(t, "application/json", first.Response.Header["Content-Type"])
	require.Contains(t, first.Response.Header, "Location")
	require.NotContains(t, first.Response.Header, "X-Debug", "headers outside StoredHeaders are dropped")
	require.NotEqual(t, uuid.Nil, first.Result.OperationID)

	// Same meaning, other spelling: a replay, byte for byte.
	second, err := b.exec(ctx, b.req(key, ` { "price": 1.25e1, "title": "mug" } `))
	require.NoError(t, err)
	require.True(t, second.Replayed)
	require.Equal(t, first.Response.Status, second.Response.Status)
	require.Equal(t, first.Response.Body, second.Response.Body)
	require.Equal(t, first.Response.Header, second.Response.Header)
	require.Zero(t, second.Result)

	require.EqualValues(t, 1, b.calls.Load())
	require.Equal(t, 1, countOps(t, b.db, key))
	require.Equal(t, 1, countRecords(t, b.db, key))
	require.EqualValues(t, 1, counter(t, b.reg, "listing_idempotency_replays_total"))
	require.EqualValues(t, 1, counter(t, b.reg, "listing_idempotency_executions_total"))

	// What is stored: the fingerprint and key id, never the request body.
	var status, keyID string
	var mac, body []byte
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT status, fingerprint_key_id, request_fingerprint, response_body
		FROM idempotency_requests WHERE idempotency_key = $1`, key).Scan(&status, &keyID, &mac, &body))
	require.Equal(t, idem.StatusCompleted, status)
	require.Equal(t, "k1", keyID)
	require.Len(t, mac, 32)
	require.Equal(t, first.Response.Body, body)
	var dump string
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT r::text FROM idempotency_requests r WHERE idempotency_key = $1`, key).Scan(&dump))
	require.NotContains(t, dump, "mug")
}

func TestDifferentFingerprintIsKeyReused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()
	_, err := b.exec(ctx, b.req(key, `{"title":"mug"}`))
	require.NoError(t, err)

	_, err = b.exec(ctx, b.req(key, `{"title":"cup"}`))
	de := requireCode(t, err, idem.CodeKeyReused)
	require.Equal(t, domain.KindConflict, de.Kind)

	r := b.req(key, `{"title":"mug"}`)
	r.ifMatch = `"7"`
	_, err = b.exec(ctx, r)
	requireCode(t, err, idem.CodeKeyReused)

	require.EqualValues(t, 1, b.calls.Load())
	require.Equal(t, 1, countOps(t, b.db, key))
	require.EqualValues(t, 2, counter(t, b.reg, "listing_idempotency_key_reused_total"))
}

func TestInProgressIsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	// The first request's handler waits for release or for the end of the test (t.Context),
	// so that a failed assertion ends the test instead of leaving its connection in use.
	ctx := t.Context()
	key := uuid.New()

	entered, release := make(chan struct{}), make(chan struct{})
	first := b.req(key, `{"title":"slow"}`)
	first.handler = bus.HandlerFunc[createOp, opResult](func(ctx context.Context, cmd createOp) (opResult, error) {
		b.calls.Add(1)
		r, err := insertOp(ctx, cmd)
		close(entered)
		select {
		case <-release:
		case <-ctx.Done():
			return r, ctx.Err()
		}
		return r, err
	})
	done := make(chan error, 1)
	go func() {
		_, err := b.exec(ctx, first)
		done <- err
	}()
	testwait.Recv(t, entered, "the first request's handler")

	start := time.Now()
	_, err := b.exec(ctx, b.req(key, `{"title":"slow"}`))
	elapsed := time.Since(start)
	de := requireCode(t, err, idem.CodeRequestInProgress)
	require.Equal(t, domain.KindConflict, de.Kind)
	require.Equal(t, 2*time.Second, de.RetryAfter)
	require.Less(t, elapsed, time.Second, "the second request must not wait for the first")

	// A different body under the same key while executing is also "in progress": the
	// fingerprint of an uncommitted record is not visible.
	_, err = b.exec(ctx, b.req(key, `{"title":"other"}`))
	requireCode(t, err, idem.CodeRequestInProgress)

	close(release)
	require.NoError(t, testwait.Recv(t, done, "the first request"))
	again, err := b.exec(ctx, b.req(key, `{"title":"slow"}`))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.EqualValues(t, 1, b.calls.Load())
	require.Equal(t, 1, countOps(t, b.db, key))
	require.EqualValues(t, 2, counter(t, b.reg, "listing_idempotency_in_progress_total"))
}

func TestRolledBackRequestLeavesNoRecord(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()

	failing := b.req(key, `{"title":"a"}`)
	boom := domain.NewError(domain.KindConflict, "SOMETHING_ELSE", "no")
	failing.handler = bus.HandlerFunc[createOp, opResult](func(ctx context.Context, cmd createOp) (opResult, error) {
		if _, err := insertOp(ctx, cmd); err != nil {
			return opResult{}, err
		}
		return opResult{}, boom
	})
	_, err := b.exec(ctx, failing)
	require.ErrorIs(t, err, boom)
	require.Zero(t, countRecords(t, b.db, key))
	require.Zero(t, countOps(t, b.db, key))

	// The key may be used again, even for another body.
	r, err := b.exec(ctx, b.req(key, `{"title":"b"}`))
	require.NoError(t, err)
	require.False(t, r.Replayed)
	require.Equal(t, 1, countOps(t, b.db, key))
	require.Equal(t, 1, countRecords(t, b.db, key))
}

func TestResponseTooLargeFailsAndStoresNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()
	big := b.req(key, `{}`)
	h := b.counting()
	big.handler = h
	render := func(any) (bus.Response, error) {
		return bus.Response{Status: 201, Body: bytes.Repeat([]byte("x"), idem.DefaultMaxResponseBytes+1)}, nil
	}
	_, err := bus.Execute(ctx, b.bus, h, bus.Request[createOp]{
		Command: createOp{Resource: key}, Actor: big.actor,
		Idempotency: &bus.Idempotency{Key: key, Method: "POST", Path: big.path, Render: render},
	})
	requireCode(t, err, idem.CodeResponseTooLarge)
	require.Zero(t, countRecords(t, b.db, key))
	require.Zero(t, countOps(t, b.db, key))

	// A failing renderer rolls back too.
	_, err = bus.Execute(ctx, b.bus, h, bus.Request[createOp]{
		Command: createOp{Resource: key}, Actor: big.actor,
		Idempotency: &bus.Idempotency{Key: key, Method: "POST", Path: big.path,
			Render: func(any) (bus.Response, error) { return bus.Response{}, errors.New("render failed") }},
	})
	require.ErrorContains(t, err, "render failed")
	require.Zero(t, countRecords(t, b.db, key))
	require.Zero(t, countOps(t, b.db, key))
}

func TestOtherUserOrWorkspaceIsAnotherRequest(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()
	otherUser := uuid.New()
	seedUser(t, b.db, otherUser)
	addWorkspace(t, b.db, b.ws, otherUser)
	otherWS := uuid.New()
	addWorkspace(t, b.db, otherWS, b.user)

	base := b.req(key, `{"title":"x"}`)
	base.path = "/v1/things" // the same path string for every actor: only the actor differs
	_, err := b.exec(ctx, base)
	require.NoError(t, err)

	byOtherUser := base
	byOtherUser.actor.UserID = otherUser
	r, err := b.exec(ctx, byOtherUser)
	require.NoError(t, err)
	require.False(t, r.Replayed)

	inOtherWS := base
	inOtherWS.actor.WorkspaceID = otherWS
	r, err = b.exec(ctx, inOtherWS)
	require.NoError(t, err)
	require.False(t, r.Replayed)

	require.EqualValues(t, 3, b.calls.Load())
	require.Equal(t, 3, countOps(t, b.db, key))
	require.Equal(t, 3, countRecords(t, b.db, key))

	// Each replays its own.
	r, err = b.exec(ctx, byOtherUser)
	require.NoError(t, err)
	require.True(t, r.Replayed)
}

func TestRotatedKeyStillReplaysOldRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()
	first, err := b.exec(ctx, b.req(key, `{"title":"x"}`))
	require.NoError(t, err)

	// A new key is prepended: it makes new fingerprints, the old one still verifies.
	_, rotated := b.newBus(t, []idem.Key{testKey("k2", 2), testKey("k1", 1)})
	again, err := b.execOn(ctx, rotated, b.req(key, `{"title":"x"}`))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.Response.Body, again.Response.Body)
	_, err = b.execOn(ctx, rotated, b.req(key, `{"title":"y"}`))
	requireCode(t, err, idem.CodeKeyReused)

	fresh := uuid.New()
	_, err = b.execOn(ctx, rotated, b.req(fresh, `{"title":"x"}`))
	require.NoError(t, err)
	var keyID string
	require.NoError(t, b.db.Owner.QueryRow(ctx,
		`SELECT fingerprint_key_id FROM idempotency_requests WHERE idempotency_key = $1`, fresh).Scan(&keyID))
	require.Equal(t, "k2", keyID)

	// With the old key removed too early, old records cannot be verified: an internal error,
	// never a second execution.
	_, only := b.newBus(t, []idem.Key{testKey("k2", 2)})
	_, err = b.execOn(ctx, only, b.req(key, `{"title":"x"}`))
	require.ErrorIs(t, err, idem.ErrUnknownKeyID)
	require.EqualValues(t, 2, b.calls.Load())
}

// expire moves a record's lifetime into the past (the CHECK keeps expires_at >= created_at+24h).
func expire(t testing.TB, db *pgtest.DB, key uuid.UUID) {
	t.Helper()
	tag, err := db.Owner.Exec(context.Background(), `UPDATE idempotency_requests
		SET created_at = now() - interval '49 hours', expires_at = now() - interval '1 hour'
		WHERE idempotency_key = $1`, key)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

func TestExpiredRecordCountsAsAbsent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key := uuid.New()
	_, err := b.exec(ctx, b.req(key, `{"title":"x"}`))
	require.NoError(t, err)
	expire(t, b.db, key)

	// Even another body: the old record is gone for every purpose.
	r, err := b.exec(ctx, b.req(key, `{"title":"y"}`))
	require.NoError(t, err)
	require.False(t, r.Replayed)
	require.EqualValues(t, 2, b.calls.Load())
	require.Equal(t, 2, countOps(t, b.db, key))
	require.Equal(t, 1, countRecords(t, b.db, key))

	var expiresIn time.Duration
	var secs float64
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT extract(epoch FROM expires_at - now())
		FROM idempotency_requests WHERE idempotency_key = $1`, key).Scan(&secs))
	expiresIn = time.Duration(secs * float64(time.Second))
	require.InDelta(t, float64(b.guard.Retention()), float64(expiresIn), float64(time.Minute))

	// And the new record replays.
	r, err = b.exec(ctx, b.req(key, `{"title":"y"}`))
	require.NoError(t, err)
	require.True(t, r.Replayed)
}

// TestRecordCommittedAfterSnapshotIsRechecked drives the race in which the advisory lock is
// free but another transaction inserts the same scope: the request reads no record, runs,
// and its record's write at the commit meets the unique constraint and waits for the other
// transaction. When that one commits, the request's transaction rolls back and runs again
// (postgres.ErrRunAgain), which replays the other's record: the handler ran once in a
// transaction that did not commit, and nothing of it stays.
func TestRecordCommittedAfterSnapshotIsRechecked(t *testing.T) {
	t.Parallel()
	for _, commit := range []bool{true, false} {
		t.Run(fmt.Sprintf("other commits=%v", commit), func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ctx := t.Context() // ends the other transaction's wait when the test fails
			key := uuid.New()
			r := b.req(key, `{"title":"x"}`)
			fp := b.guard.Fingerprinter().Fingerprint("POST", r.path,
				bus.FingerprintInput{Body: []byte(r.body), Headers: map[string]string{"Content-Type": "application/json"}})

			// The other transaction writes the record without taking the advisory lock.
			inserted, finish := make(chan struct{}), make(chan struct{})
			otherDone := make(chan error, 1)
			go func() {
				otherDone <- postgres.InTx(ctx, b.db.App, postgres.Scope{WorkspaceID: b.ws, UserID: b.user},
					func(ctx context.Context, tx pgx.Tx) error {
						_, err := tx.Exec(ctx, `INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path,
							idempotency_key, request_fingerprint, fingerprint_key_id, status, response_status, response_body)
							VALUES (gen_random_uuid(), $1, $2, 'POST', $3, $4, $5, $6, 'completed', 201, '\x7b7d')`,
							b.ws, b.user, r.path, key, fp.MAC, fp.KeyID)
						close(inserted)
						select {
						case <-finish:
						case <-ctx.Done():
							return ctx.Err()
						}
						if err == nil && !commit {
							return errors.New("roll back")
						}
						return err
					})
			}()
			testwait.Recv(t, inserted, "the other transaction's insert")

			result := make(chan error, 1)
			var reply bus.Reply[opResult]
			go func() {
				var err error
				reply, err = b.exec(ctx, r)
				result <- err
			}()
			// Wait until our request blocks on the other's uncommitted row.
			require.Eventually(t, func() bool {
				var waiting int
				require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting))
				return waiting > 0
			}, 10*time.Second, 10*time.Millisecond)
			close(finish)
			otherErr := testwait.Recv(t, otherDone, "the other transaction")
			require.NoError(t, testwait.Recv(t, result, "the request"))
			if commit {
				require.NoError(t, otherErr)
				require.True(t, reply.Replayed)
				require.Equal(t, []byte("{}"), reply.Response.Body)
				require.EqualValues(t, 1, b.calls.Load(), "the run whose commit met the record")
				require.Zero(t, countOps(t, b.db, key), "nothing of that run committed")
			} else {
				require.Error(t, otherErr)
				require.False(t, reply.Replayed)
				require.EqualValues(t, 1, b.calls.Load())
				require.Equal(t, 1, countOps(t, b.db, key))
			}
			require.Equal(t, 1, countRecords(t, b.db, key))
		})
	}
}

func TestConcurrentIdenticalRequestsExecuteOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	const rounds, clients = 20, 50
	for round := range rounds {
		callsBefore := b.calls.Load()
		key := uuid.New()
		start := make(chan struct{})
		var wg sync.WaitGroup
		var executed, replayed, inProgress, other atomic.Int64
		var firstOther atomic.Value
		for range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := b.exec(ctx, b.req(key, `{"title":"same"}`))
				var de *domain.Error
				switch {
				case err == nil && r.Replayed:
					replayed.Add(1)
				case err == nil:
					executed.Add(1)
				case errors.As(err, &de) && de.Code == idem.CodeRequestInProgress:
					inProgress.Add(1)
				default:
					other.Add(1)
					firstOther.CompareAndSwap(nil, fmt.Sprint(err))
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Zero(t, other.Load(), "round %d: unexpected error %v", round, firstOther.Load())
		t.Logf("round %d: executed %d, replayed %d, in progress %d", round, executed.Load(), replayed.Load(), inProgress.Load())
		require.EqualValues(t, 1, executed.Load(), "round %d", round)
		require.EqualValues(t, clients, executed.Load()+replayed.Load()+inProgress.Load())
		require.Equal(t, 1, countOps(t, b.db, key), "round %d: operations rows", round)
		require.Equal(t, 1, countRecords(t, b.db, key), "round %d: records", round)
		// One run commits. A second run happens only when the lock's holder committed
		// between a request's snapshot and its lock: that run's commit meets the record
		// at the unique constraint, rolls back, and the chain runs again as a replay.
		calls := b.calls.Load() - callsBefore
		require.True(t, calls == 1 || calls == 2, "round %d: the handler ran %d times", round, calls)
	}
}

func TestWithoutIdempotencyTheChainIsUntouched(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	res := uuid.New()
	r, err := bus.Execute(ctx, b.bus, b.counting(), bus.Request[createOp]{
		Command: createOp{Resource: res}, Actor: bus.Actor{WorkspaceID: b.ws, UserID: b.user},
	})
	require.NoError(t, err)
	require.Nil(t, r.Response)
	require.Equal(t, res, r.Result.Resource)
	var n int
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT count(*) FROM idempotency_requests`).Scan(&n))
	require.Zero(t, n)
}

func TestMiddlewareRefusesToRunOutsideTheTransaction(t *testing.T) {
	t.Parallel()
	b := setup(t)
	noTx := bus.New(b.guard.Middleware())
	_, err := b.execOn(context.Background(), noTx, b.req(uuid.New(), `{}`))
	require.ErrorIs(t, err, postgres.ErrNoTx)
	require.Zero(t, b.calls.Load())

	// Without a workspace there is no scope to store under.
	r := b.req(uuid.New(), `{}`)
	r.actor.WorkspaceID = uuid.Nil
	_, err = b.exec(context.Background(), r)
	require.ErrorContains(t, err, "workspace")
	require.Zero(t, b.calls.Load())
}

func TestCleanupDeletesOnlyExpiredRecordsInBatches(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	ws2 := uuid.New()
	addWorkspace(t, b.db, ws2, b.user)

	var expired, live []uuid.UUID
	for i := range 14 {
		for _, ws := range []uuid.UUID{b.ws, ws2} {
			key := uuid.New()
			r := b.req(key, `{}`)
			r.actor.WorkspaceID = ws
			_, err := b.exec(ctx, r)
			require.NoError(t, err)
			if i < 10 {
				expire(t, b.db, key)
				expired = append(expired, key)
			} else {
				live = append(live, key)
			}
		}
	}

	// Without a workspace context, nothing can be deleted.
	err := postgres.InTx(ctx, b.db.App, postgres.Scope{}, func(ctx context.Context, tx pgx.Tx) error {
		n, err := idem.NewStore().DeleteExpired(ctx, 1000)
		require.Zero(t, n)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM idempotency_requests`)
		require.Zero(t, tag.RowsAffected())
		return err
	})
	require.ErrorContains(t, err, "no workspace scope")
	for _, k := range expired {
		require.Equal(t, 1, countRecords(t, b.db, k))
	}

	m, err := idem.NewMetrics(b.reg)
	require.NoError(t, err)
	c, err := idem.NewCleaner(b.db.App, idem.CleanerConfig{BatchSize: 3, Metrics: m})
	require.NoError(t, err)
	st, err := c.RunOnce(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 20, st.Deleted)
	require.Equal(t, 2, st.Workspaces)
	require.Equal(t, 8, st.Batches, "10 rows per workspace in batches of 3: 3+3+3+1")
	for _, k := range expired {
		require.Zero(t, countRecords(t, b.db, k))
	}
	for _, k := range live {
		require.Equal(t, 1, countRecords(t, b.db, k))
	}
	require.EqualValues(t, 20, counter(t, b.reg, "listing_idempotency_cleanup_deleted_total"))

	st, err = c.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Deleted)

	_, err = idem.NewCleaner(b.db.App, idem.CleanerConfig{BatchSize: -1})
	require.Error(t, err)
}

func TestCleanerRunLoopsUntilCancelled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	key := uuid.New()
	_, err := b.exec(context.Background(), b.req(key, `{}`))
	require.NoError(t, err)
	expire(t, b.db, key)

	c, err := idem.NewCleaner(b.db.App, idem.CleanerConfig{})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, 20*time.Millisecond, nil) }()
	require.Eventually(t, func() bool { return countRecords(t, b.db, key) == 0 }, 10*time.Second, 20*time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// previousSaveSQL is the statement with which the build before the record's plain INSERT
// (commit aa7b15e) wrote a completed record at the commit: a fixture, so that a record in
// the format already stored keeps replaying.
const previousSaveSQL = `
WITH w AS (
  INSERT INTO idempotency_requests AS r (id, workspace_id, user_id, method, path, idempotency_key,
    request_fingerprint, fingerprint_key_id, status, response_status, response_headers, response_body,
    completed_at, expires_at)
  VALUES ($6, $1, $2, $3, $4, $5, $7, $8, 'completed', $9, $10, $11, now(),
    now() + $12::bigint * interval '1 microsecond')
  ON CONFLICT ON CONSTRAINT idempotency_requests_scope DO UPDATE
  SET id = excluded.id, request_fingerprint = excluded.request_fingerprint,
    fingerprint_key_id = excluded.fingerprint_key_id, status = excluded.status,
    response_status = excluded.response_status, response_headers = excluded.response_headers,
    response_body = excluded.response_body, created_at = now(), completed_at = now(),
    expires_at = excluded.expires_at
  WHERE r.expires_at <= now()
  RETURNING 1
)
SELECT 1 / count(*)::int FROM w`

// TestRecordsOfEarlierBuildsAnswer: a completed record written as the previous build wrote it
// replays byte for byte (and another body under its key is ErrKeyReused); a live executing
// record, as releases before that wrote at the claim, answers in progress. The handler never
// runs.
func TestRecordsOfEarlierBuildsAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	key, executing := uuid.New(), uuid.New()
	r := b.req(key, `{"title":"mug","price":12.5}`)
	fp := b.guard.Fingerprinter().Fingerprint("POST", r.path,
		bus.FingerprintInput{Body: []byte(r.body), Headers: map[string]string{"Content-Type": "application/json"}})
	headers := map[string]string{"Content-Type": "application/json", "Location": "/v1/operations/0193a3f0-0000-7000-8000-000000000001"}
	body := []byte(`{"operation":{"id":"0193a3f0-0000-7000-8000-000000000001","resource_id":"` + key.String() + `"}}`)
	require.NoError(t, postgres.InTx(ctx, b.db.App, postgres.Scope{WorkspaceID: b.ws, UserID: b.user},
		func(ctx context.Context, tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, previousSaveSQL, b.ws, b.user, "POST", r.path, key, uuid.New(), fp.MAC, fp.KeyID,
				http.StatusAccepted, headers, body, (48 * time.Hour).Microseconds()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO idempotency_requests (id, workspace_id, user_id, method, path,
				idempotency_key, request_fingerprint, fingerprint_key_id, status)
				VALUES (gen_random_uuid(), $1, $2, 'POST', $3, $4, $5, $6, 'executing')`,
				b.ws, b.user, r.path, executing, fp.MAC, fp.KeyID)
			return err
		}))

	reply, err := b.exec(ctx, r)
	require.NoError(t, err)
	require.True(t, reply.Replayed)
	require.Equal(t, http.StatusAccepted, reply.Response.Status)
	require.Equal(t, headers, reply.Response.Header)
	require.Equal(t, body, reply.Response.Body)

	_, err = b.exec(ctx, b.req(key, `{"title":"cup"}`))
	requireCode(t, err, idem.CodeKeyReused)

	r.key = executing
	_, err = b.exec(ctx, r)
	requireCode(t, err, idem.CodeRequestInProgress)

	require.Zero(t, b.calls.Load())
	require.Equal(t, 1, countRecords(t, b.db, key))
	require.Equal(t, 1, countRecords(t, b.db, executing))
}
