package console_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/bullmq"
	"github.com/listingkit/listing/infra/console"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/internal/testwait"
)

// pagesBundle is a console as listing_operator on an isolated database, with one BullMQ
// queue under a prefix of its own, and a client signed in as ada through Bearer.
type pagesBundle struct {
	db    *pgtest.DB
	rdb   *redis.Client
	bcfg  bullmq.Config
	queue string
	c     *client
}

func setupPages(t *testing.T) pagesBundle {
	t.Helper()
	return setupPagesWith(t, func(*console.Config) {})
}

// setupPagesWith is setupPages with the console's Config changed by configure.
func setupPagesWith(t *testing.T, configure func(*console.Config)) pagesBundle {
	t.Helper()
	t.Parallel()
	db := pgtest.New(t)
	redisURL := os.Getenv("REDIS_URL")
	if redisURL == "" {
		redisURL = "redis://127.0.0.1:6379/0"
	}
	opts, err := redis.ParseURL(redisURL)
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	prefix := "console" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10]
	t.Cleanup(func() {
		ctx := context.Background()
		iter := rdb.Scan(ctx, 0, prefix+":*", 500).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
		_ = rdb.Close()
	})
	bcfg := bullmq.Config{Client: rdb, Prefix: prefix}
	queue := "store-verification"
	cfg := console.Config{Operators: operators(), Pool: db.OperatorPool(t), Queues: []string{queue}, BullMQ: bcfg}
	configure(&cfg)
	ts := newServer(t, cfg)
	c := newClient(t, ts.URL)
	c.header.Set("Authorization", "Bearer "+adaSecret)
	return pagesBundle{db: db, rdb: rdb, bcfg: bcfg, queue: queue, c: c}
}

// workspace creates a workspace as the owner (the operator belongs to none).
func (b pagesBundle) workspace(t *testing.T) uuid.UUID {
	t.Helper()
	ws := uuid.New()
	_, err := b.db.Owner.Exec(context.Background(), `INSERT INTO workspaces (id, name) VALUES ($1, 'w')`, ws)
	require.NoError(t, err)
	return ws
}

// event inserts an outbox event as the owner.
func (b pagesBundle) event(t *testing.T, ws uuid.UUID, dest, status string, attempts int, lastError string) uuid.UUID {
	t.Helper()
	id := uuid.New()
	var le *string
	if lastError != "" {
		le = &lastError
	}
	q := `INSERT INTO outbox_events (id, workspace_id, event_type, destination, aggregate_type,
		aggregate_id, event_payload, status, attempt_count, last_error)
		VALUES ($1, $2, 'store.verification_requested', $3, 'store', 'a', '{"store_id":"s"}', $4, $5, $6)`
	if status == "dispatched" {
		q = `INSERT INTO outbox_dispatched (id, workspace_id, event_type, destination, aggregate_type,
			aggregate_id, event_payload, metadata, attempt_count, created_at, dispatched_at)
			SELECT $1, $2, 'store.verification_requested', $3, 'store', 'a', '{"store_id":"s"}', '{}', $5, now(), now()
			WHERE $4::text = 'dispatched' AND $6::text IS NULL`
	}
	_, err := b.db.Owner.Exec(context.Background(), q, id, ws, dest, status, attempts, le)
	require.NoError(t, err)
	return id
}

// The outbox page shows dead letters of workspaces the operator has nothing to do with, with
// a sanitized error and their redrive history; redrive and purge act as the operator and are
// recorded with the name; a reason is required.
func TestOutboxPage(t *testing.T) {
	b := setupPages(t)
	ctx := context.Background()
	wsA, wsB := b.workspace(t), b.workspace(t)
	dead := b.event(t, wsA, "store-verification", "dead_letter", 1, "dial tcp: refused; api_key=sk_live_42 https://u:pw@host/x?sig=abc")
	doomed := b.event(t, wsB, "media-processing", "dead_letter", 3, "boom")
	b.event(t, wsA, "store-verification", "pending", 0, "")
	b.event(t, wsB, "store-verification", "dispatched", 1, "")
	_, err := b.db.Owner.Exec(ctx, `INSERT INTO outbox_redrives (id, workspace_id, event_id, redriven_by, reason, previous_attempt_count)
		VALUES (gen_random_uuid(), $1, $2, 'grace', 'first try', 7)`, wsA, dead)
	require.NoError(t, err)

	status, body := b.c.get("/outbox")
	require.Equal(t, http.StatusOK, status, body)
	for _, want := range []string{dead.String(), doomed.String(), wsA.String(), wsB.String(), "media-processing",
		"dial tcp: refused", "[redacted]", "by grace: first try (after 7 attempts)", `id="oldest-pending"`} {
		require.Contains(t, body, want)
	}
	for _, secret := range []string{"sk_live_42", "pw@", "sig=abc"} {
		require.NotContains(t, body, secret)
	}
	require.NotContains(t, body, `{"store_id"`, "no payload")
	// The delivered event is in the log, not in the live table's statuses.
	require.Contains(t, body, `in the last hour <strong id="delivered-hour">1</strong>`)
	require.Regexp(t, `<svg class="chart" id="delivered-chart" role="img"[^>]*>.*<rect `, body, "a bar for the delivered minute")
	require.Contains(t, body, `<tr><td>store-verification</td><td>1</td></tr>`)
	require.NotContains(t, body, `<th scope="row">dispatched</th>`)

	// A reason is required; the event stays a dead letter.
	form := url.Values{"workspace": {wsA.String()}, "id": {dead.String()}, "reason": {"  "}}
	status, _, _ = b.c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusBadRequest, status)

	form.Set("reason", "platform fixed")
	status, _, resp := b.c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusSeeOther, status)
	loc := resp.Header.Get("Location")
	require.Contains(t, loc, "/outbox/event?")
	status, body = b.c.get(loc)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<dd id="event-status">pending</dd>`)
	require.Contains(t, body, "platform fixed")
	require.Contains(t, body, "Redriven")
	var by string
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT redriven_by FROM outbox_redrives WHERE event_id = $1 AND reason = 'platform fixed'`,
		dead).Scan(&by))
	require.Equal(t, "ada", by)

	// Again: not a dead letter any more.
	status, _, resp = b.c.post("/outbox/redrive", form)
	require.Equal(t, http.StatusSeeOther, status)
	require.Contains(t, resp.Header.Get("Location"), "redrive-none")

	status, _, resp = b.c.post("/outbox/purge", url.Values{"workspace": {wsB.String()}, "id": {doomed.String()}, "reason": {"store deleted"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/outbox?done=purge", resp.Header.Get("Location"))
	require.NoError(t, b.db.Owner.QueryRow(ctx, `SELECT purged_by FROM outbox_purges WHERE event_id = $1`, doomed).Scan(&by))
	require.Equal(t, "ada", by)

	status, body = b.c.get("/outbox?done=purge")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "Purged")
	require.Contains(t, body, "No dead letter.")
	require.Contains(t, body, "store deleted", "the purge is in the latest actions")

	// The event page of another workspace's id is not found (RLS scopes it to one workspace).
	status, _ = b.c.get("/outbox/event?workspace=" + wsB.String() + "&id=" + dead.String())
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.c.get("/outbox/event?workspace=x&id=y")
	require.Equal(t, http.StatusBadRequest, status)
}

// The queues page shows counts, the oldest waiting job and failed jobs with their reasons;
// retry and remove act and are recorded in operator_actions with the operator's name.
func TestQueuesPage(t *testing.T) {
	b := setupPages(t)
	ctx := context.Background()
	pub, err := bullmq.NewPublisher(bullmq.PublisherConfig{Config: b.bcfg}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pub.Close() })
	ids := []string{uuid.NewString(), uuid.NewString()}
	// The first job is a task's (app/worker's envelope, with its workspace and operation);
	// the third is its last look, which fails too.
	ws, op := uuid.New(), uuid.New()
	envelope := fmt.Sprintf(`{"event_id":%q,"workspace_id":%q,"event_type":"store.verification_requested","payload":{"operation_id":%q}}`,
		ids[0], ws, op)
	look := uuid.NewString()
	lookEnvelope := fmt.Sprintf(`{"event_id":%q,"workspace_id":%q,"event_type":"store.verification_requested",
		"payload":{"operation_id":%q,"last_look":{"code":"PLATFORM_UNAVAILABLE","message":"the platform failed"}}}`, look, ws, op)
	_, err = pub.Add(ctx, b.queue, []bullmq.Job{{ID: ids[0], Name: "t", Data: []byte(envelope)}, {ID: ids[1], Name: "t", Data: []byte(`{}`)}})
	require.NoError(t, err)
	w, err := bullmq.NewWorker(bullmq.WorkerConfig{Config: b.bcfg, Queue: b.queue, DrainDelay: 100 * time.Millisecond},
		func(ctx context.Context, j *bullmq.Job) (any, error) {
			return nil, bullmq.Unrecoverable(fmt.Errorf("platform answered 422 for job %s", j.ID))
		})
	require.NoError(t, err)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	require.Eventually(t, func() bool {
		c, err := bullmq.QueueCounts(ctx, b.bcfg, b.queue)
		return err == nil && c[bullmq.StateFailed] == 2
	}, 10*time.Second, 50*time.Millisecond)
	_, err = pub.Add(ctx, b.queue, []bullmq.Job{{ID: look, Name: "t", Data: []byte(lookEnvelope)}})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		c, err := bullmq.QueueCounts(ctx, b.bcfg, b.queue)
		return err == nil && c[bullmq.StateFailed] == 3
	}, 10*time.Second, 50*time.Millisecond)
	stop()
	require.NoError(t, testwait.Recv(t, done, "the worker's stop"))
	waiting := uuid.NewString()
	_, err = pub.Add(ctx, b.queue, []bullmq.Job{{ID: waiting, Name: "t", Data: []byte(`{}`)}})
	require.NoError(t, err)

	status, body := b.c.get("/queues")
	require.Equal(t, http.StatusOK, status, body)
	for _, id := range ids {
		require.Contains(t, body, "platform answered 422 for job "+id)
	}
	require.Contains(t, body, "<h2 id=\"q-store-verification\">store-verification</h2>")
	require.Contains(t, body, "<th scope=\"col\">failed</th>")
	require.Regexp(t, `<tr><th scope="row"><a href="#q-`+b.queue+`">`+b.queue+`</a></th><td>1</td>(<td>\d+</td>){4}<td><strong class="err">3</strong></td>`,
		body, "the summary: a job waiting, three failed")
	require.Contains(t, body, ` · operation <a href="/operations?id=`+op.String()+`">`, "a task's job links to its operation")
	require.Contains(t, body, `of workspace <a href="/workspaces/`+ws.String()+`">`)
	require.Equal(t, 2, strings.Count(body, " · operation <a "), "a job without an envelope links nowhere")
	require.Equal(t, 2, strings.Count(body, `<article class="failure">`), "the operation's attempt and its last look are one failure")
	require.Contains(t, body, `One failure of operation <a href="/operations?id=`+op.String()+`"><code>`+op.String()+`</code></a>: 2 failed jobs`)
	require.Less(t, strings.Index(body, "job-"+b.queue+"-"+look), strings.Index(body, "job-"+b.queue+"-"+ids[0]), "its latest job first")
	require.Contains(t, body, `<strong class="last-look">last look</strong> before failing PLATFORM_UNAVAILABLE`)

	form := url.Values{"queue": {b.queue}, "id": {ids[0]}}
	status, _, _ = b.c.post("/queues/retry", form)
	require.Equal(t, http.StatusBadRequest, status, "a reason is required")
	form.Set("queue", "other")
	form.Set("reason", "fixed")
	status, _, _ = b.c.post("/queues/retry", form)
	require.Equal(t, http.StatusBadRequest, status, "unknown queue")
	form.Set("queue", b.queue)
	status, _, resp := b.c.post("/queues/retry", form)
	require.Equal(t, http.StatusSeeOther, status)
	require.Equal(t, "/queues?done=retry", resp.Header.Get("Location"))
	atm, err := b.rdb.HGet(ctx, b.bcfg.Prefix+":"+b.queue+":"+ids[0], "atm").Result()
	require.NoError(t, err)
	require.Equal(t, "0", atm)

	status, _, _ = b.c.post("/queues/retry", form)
	require.Equal(t, http.StatusConflict, status, "not failed any more")
	status, _, _ = b.c.post("/queues/remove", url.Values{"queue": {b.queue}, "id": {ids[1]}, "reason": {"duplicate"}})
	require.Equal(t, http.StatusSeeOther, status)
	require.Zero(t, b.rdb.Exists(ctx, b.bcfg.Prefix+":"+b.queue+":"+ids[1]).Val())

	rows, err := b.db.Owner.Query(ctx, `SELECT operator || ' ' || action || ' ' || target || ' ' || reason FROM operator_actions ORDER BY acted_at`)
	require.NoError(t, err)
	var got []string
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		got = append(got, s)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []string{"ada job retry " + b.queue + "/" + ids[0] + " fixed", "ada job remove " + b.queue + "/" + ids[1] + " duplicate"}, got,
		"the refused retry is not recorded")

	status, body = b.c.get("/queues?done=remove")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "Removed")
	require.Contains(t, body, "duplicate")
	require.NotContains(t, body, "platform answered 422 for job "+ids[0], "retried")
	require.NotContains(t, body, "platform answered 422 for job "+ids[1], "removed")
	require.NotContains(t, body, "One failure of operation", "the last look's job alone")
}

// Operations: one by id whatever its workspace, and a workspace's recent failures.
func TestOperationsPage(t *testing.T) {
	b := setupPages(t)
	ctx := context.Background()
	ws := b.workspace(t)
	failed, ok := uuid.New(), uuid.New()
	_, err := b.db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, error_code, error_message)
		VALUES ($1, $3, 'publication', 'failed', 'publication', gen_random_uuid(), 'PLATFORM_REJECTED', 'title too long'),
		       ($2, $3, 'publication', 'succeeded', 'publication', gen_random_uuid(), '', '')`, failed, ok, ws)
	require.NoError(t, err)

	status, body := b.c.get("/operations")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `name="id"`)
	status, body = b.c.get("/operations?id=" + ok.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "succeeded")
	require.Contains(t, body, ws.String())
	// A running operation shows its progress as a bar.
	running, syncing := uuid.New(), uuid.New()
	_, err = b.db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, progress, progress_at)
		VALUES ($1, $3, 'material_transfer', 'running', 'media', gen_random_uuid(), '{"done": 30, "total": 120}', now()),
		       ($2, $3, 'product_sync', 'running', 'product_sync', gen_random_uuid(), '{"done": 250, "total": null}', now())`,
		running, syncing, ws)
	require.NoError(t, err)
	status, body = b.c.get("/operations?id=" + running.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `<progress max="100" value="25">25%</progress> 30 of 120 (25%)`)
	status, body = b.c.get("/operations?id=" + syncing.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `250 done (total unknown)`)
	// A finished one keeps its last report, with no bar saying it is still in progress.
	synced := uuid.New()
	_, err = b.db.Owner.Exec(ctx, `INSERT INTO operations (id, workspace_id, type, status, resource_type, resource_id, progress, progress_at)
		VALUES ($1, $2, 'product_sync', 'succeeded', 'product_sync', gen_random_uuid(), '{"done": 9950, "total": null}', now())`, synced, ws)
	require.NoError(t, err)
	status, body = b.c.get("/operations?id=" + synced.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, `9950 done at its last report, before it ended`)
	require.NotContains(t, body, `<progress`)
	status, body = b.c.get("/operations?id=" + ok.String())
	require.Equal(t, http.StatusOK, status)
	require.NotContains(t, body, `id="progress"`, "no progress reported")

	status, body = b.c.get("/operations?workspace=" + ws.String())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "PLATFORM_REJECTED: title too long")
	require.NotContains(t, body, ok.String(), "only failures")
	status, _ = b.c.get("/operations?id=" + uuid.NewString())
	require.Equal(t, http.StatusNotFound, status)
	status, _ = b.c.get("/operations?id=nope")
	require.Equal(t, http.StatusBadRequest, status)
	status, body = b.c.get("/operations?workspace=" + uuid.NewString())
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "No failed operation.")
}

// The console needs listing_operator: as app_user its pages fail (the functions refuse it).
func TestConsoleAsAppUserFails(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ts := newServer(t, console.Config{Operators: operators(), Pool: db.App})
	c := newClient(t, ts.URL)
	c.header.Set("Authorization", "Bearer "+adaSecret)
	status, body := c.get("/outbox")
	require.Equal(t, http.StatusInternalServerError, status)
	require.NotContains(t, body, "permission denied", "internals stay in the log")
	_, err := db.App.Exec(context.Background(), `SELECT * FROM operator_dead_letters(1)`)
	require.True(t, err != nil && strings.Contains(err.Error(), "permission denied"), "%v", errors.Unwrap(err))
}
