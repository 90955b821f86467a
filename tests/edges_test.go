package tests

// The edges of a job's life, with real processes: a worker stopped (SIGTERM) while its call
// is in flight, a worker whose lock renewals fail, a record step that fails after the call,
// a task that fails for good while the platform holds its product.

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/aiprovider"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/redistest"
	"github.com/listingkit/listing/internal/servicetest"
)

// slowFront serves a marketplace sandbox that ignores Idempotency-Key. Each create
// (POST /v1/products) is announced on creating, then applied and answered after delay,
// whether or not its client is still waiting (a gateway that applies what it received).
type slowFront struct {
	sb       *marketplace.Sandbox
	delay    time.Duration
	creating chan struct{}
}

func newSlowFront(t *testing.T, delay time.Duration) (*slowFront, string) {
	t.Helper()
	sb, err := marketplace.New(marketplace.Config{})
	require.NoError(t, err)
	sb.SetIgnoreIdempotencyKey(true)
	f := &slowFront{sb: sb, delay: delay, creating: make(chan struct{}, 8)}
	srv, err := sandbox.Start("", f)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return f, srv.URL
}

func (f *slowFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/products" {
		f.creating <- struct{}{}
		time.Sleep(f.delay)
		f.sb.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
		return
	}
	f.sb.ServeHTTP(w, r)
}

// TestEdgesSIGTERMDuringASlowCall: the worker holding a publication's job gets SIGTERM while
// its create is in flight at a gateway that ignores Idempotency-Key and takes longer than
// the old 10 s stop timeout to apply it. A second worker runs beside it. The stopping
// worker lets the call end and records it (renewing the job's lock meanwhile); it does not
// hand the job back while the create may still land, so the second worker never creates a
// second product.
func TestEdgesSIGTERMDuringASlowCall(t *testing.T) {
	t.Parallel()
	const callTime = 12 * time.Second
	front, url := newSlowFront(t, callTime)
	w := newLivenessWorld(t, url, 0, map[string]string{
		"PLATFORM_TIMEOUT":  "15s",
		"AI_TIMEOUT":        "15s",
		"FETCH_TIMEOUT":     "15s",
		"JOB_LOCK_DURATION": "30s",
		"RECONCILE_AFTER":   "5m", // not what this test is about
	})
	w1 := w.startWork(t)
	pubID, opID, _ := w.publish(t)
	select {
	case <-front.creating:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "no worker reached the platform")
	}
	w.startWork(t)
	since := time.Now()
	require.NoError(t, w1.cmd.Process.Signal(syscall.SIGTERM))

	select {
	case <-w1.done:
	case <-time.After(callTime + 30*time.Second):
		require.FailNow(t, "the stopping worker did not exit after its call ended")
	}
	require.Greater(t, time.Since(since), callTime/2, "the stopping worker waited for its call")
	status, code := w.waitFinished(t, opID, since, callTime+livenessJobBudget)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Len(t, front.creating, 0, "one create only")
	require.Contains(t, w1.out.String(), "outcome=succeeded", "the stopping worker recorded its call")
}

// TestEdgesExhaustedPublicationWhoseProductExists: the worker dies after the platform
// created the product and the queues' Redis database is flushed; with RECONCILE_MAX=0 the
// first reconciliation decides DELIVERY_EXHAUSTED. Before it records that, the publication
// takes its last look (a delivery of its own): the product exists, so it succeeds.
func TestEdgesExhaustedPublicationWhoseProductExists(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 1, true)
	w := newLivenessWorld(t, url, 8, map[string]string{"RECONCILE_MAX": "0"})
	pubID, opID, _, since := w.loseJobAfterCreate(t, front)

	status, code := w.waitFinished(t, opID, since, livenessBound)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Equal(t, 1, w.env.Count(`SELECT count(*) FROM outbox_all_events WHERE event_type = 'publication.requested'
		AND event_payload->>'publication_id' = $1 AND event_payload->'last_look'->>'code' = 'DELIVERY_EXHAUSTED'`, pubID),
		"one last look, holding DELIVERY_EXHAUSTED")
}

// TestEdgesRecordFailsOnceAfterTheAICall: the record transaction of an AI task fails once
// (a trigger of the test's database raises on the first update that would make the task
// succeed) after the provider answered. The worker retries the record step with the answer
// it holds: one provider call (one bill), and the task succeeds.
func TestEdgesRecordFailsOnceAfterTheAICall(t *testing.T) {
	t.Parallel()
	ai, err := aiprovider.New(aiprovider.Config{APIKeys: []string{"edges-ai-key"}})
	require.NoError(t, err)
	aiSrv, err := sandbox.Start("", ai)
	require.NoError(t, err)
	t.Cleanup(func() { _ = aiSrv.Close() })
	_, url := newHeldFront(t, 0, false)
	w := newLivenessWorld(t, url, 0, map[string]string{"AI_BASE_URL": aiSrv.URL, "AI_API_KEY": "edges-ai-key",
		"RECONCILE_AFTER": "5m"})
	ctx := context.Background()
	_, err = w.db.Owner.Exec(ctx, `
		CREATE SEQUENCE edges_record_tries;
		CREATE FUNCTION edges_fail_first_record() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
		  IF NEW.status = 'succeeded' AND OLD.status <> 'succeeded' AND nextval('edges_record_tries') = 1 THEN
		    RAISE EXCEPTION 'injected: the record transaction fails once';
		  END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER edges_fail_first_record BEFORE UPDATE ON ai_tasks
		  FOR EACH ROW EXECUTE FUNCTION edges_fail_first_record();`)
	require.NoError(t, err)
	work := w.startWork(t)

	task := w.env.Do(servicetest.Request{Method: "POST", Path: seedWS(w.acct) + "/ai-tasks", Token: w.acct.AccessToken,
		Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": w.productID, "input": map[string]any{"prompt": "once"}}})
	require.Equal(t, http.StatusAccepted, task.Status, "%s", task.Body)
	status, code := w.waitFinished(t, seedField(t, task, "operation", "id"), time.Now(), livenessJobBudget)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, ai.Calls(aiprovider.EndpointChat), "one provider call")
	require.Equal(t, "2", seedOne(t, w.db, "SELECT last_value::text FROM edges_record_tries"),
		"the record transaction failed once, then succeeded")
	require.Equal(t, "1", seedOne(t, w.db, "SELECT attempts::text FROM ai_tasks WHERE id = $1", seedField(t, task, "ai_task", "id")),
		"one attempt")
	require.Contains(t, work.out.String(), "outcome=succeeded")
}

// failRecordsUntilHeld makes every record transaction of table's tasks fail while no result
// is held on the task: the first delivery's record step gives up (all its retries) after
// its call, holds the result, and a later delivery, which records the held result, succeeds.
// It returns how many record transactions failed so far.
func failRecordsUntilHeld(t *testing.T, db *pgtest.DB, table string) func() int {
	t.Helper()
	_, err := db.Owner.Exec(context.Background(), `
		CREATE SEQUENCE test_failed_records;
		CREATE FUNCTION test_fail_records_until_held() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
		  IF NEW.status = 'succeeded' AND OLD.status <> 'succeeded' AND OLD.held_result IS NULL THEN
		    PERFORM nextval('test_failed_records');
		    RAISE EXCEPTION 'injected: the record transaction fails until a result is held';
		  END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER test_fail_records_until_held BEFORE UPDATE ON `+table+`
		  FOR EACH ROW EXECUTE FUNCTION test_fail_records_until_held();`)
	require.NoError(t, err)
	return func() int {
		// A sequence's increments are not rolled back with the failed transactions.
		n, err := strconv.Atoi(seedOne(t, db, "SELECT CASE WHEN is_called THEN last_value ELSE 0 END::text FROM test_failed_records"))
		require.NoError(t, err)
		return n
	}
}

// TestEdgesRecordGivesUpAfterTheAICall: the record step of an AI task gives up after the
// provider answered (every record transaction fails until the result is held). The result
// is held on the task and the job's next delivery records it: its retry, or, when that was
// the job's last attempt, its snooze (worker.HeldRetry), not the reconciler's delivery: the
// task succeeds well within RECONCILE_AFTER (5m here). One provider call (one bill).
// TestMemoryTransportRecordGivesUpAfterTheAICall is the memory transport's twin.
func TestEdgesRecordGivesUpAfterTheAICall(t *testing.T) {
	t.Parallel()
	for _, attempts := range []string{"3", "1"} {
		t.Run("attempts_"+attempts, func(t *testing.T) {
			t.Parallel()
			ai, err := aiprovider.New(aiprovider.Config{APIKeys: []string{"edges-ai-key"}})
			require.NoError(t, err)
			aiSrv, err := sandbox.Start("", ai)
			require.NoError(t, err)
			t.Cleanup(func() { _ = aiSrv.Close() })
			_, url := newHeldFront(t, 0, false)
			w := newLivenessWorld(t, url, 0, map[string]string{"AI_BASE_URL": aiSrv.URL, "AI_API_KEY": "edges-ai-key",
				"JOB_ATTEMPTS": attempts, "RECONCILE_AFTER": "5m"})
			failed := failRecordsUntilHeld(t, w.db, "ai_tasks")
			w.startWork(t)

			task := w.env.Do(servicetest.Request{Method: "POST", Path: seedWS(w.acct) + "/ai-tasks", Token: w.acct.AccessToken,
				Header: seedKey(), Body: map[string]any{"kind": "text", "product_id": w.productID, "input": map[string]any{"prompt": "held"}}})
			require.Equal(t, http.StatusAccepted, task.Status, "%s", task.Body)
			// Two job budgets: the delivery that gives up (its record retries within
			// worker.RecordRetryBudget) and the one that records; far under RECONCILE_AFTER.
			status, code := w.waitFinished(t, seedField(t, task, "operation", "id"), time.Now(), 2*livenessJobBudget+worker.HeldRetry)
			require.Equal(t, "succeeded", status, code)
			require.GreaterOrEqual(t, failed(), worker.RecordRetries+1, "the first delivery's record step gave up")
			require.Equal(t, 1, ai.Calls(aiprovider.EndpointChat), "one provider call")
			taskID := seedField(t, task, "ai_task", "id")
			require.Equal(t, "", seedOne(t, w.db, "SELECT coalesce(held_result::text, '') FROM ai_tasks WHERE id = $1", taskID))
		})
	}
}

// lockFront serves a marketplace sandbox that ignores Idempotency-Key and logs every
// request; the first create (POST /v1/products) is announced on creating, then applied and
// answered after hold, whether or not its client still waits.
type lockFront struct {
	sb       *marketplace.Sandbox
	hold     time.Duration
	creating chan time.Time
	mu       sync.Mutex
	log      []frontRequest
}

type frontRequest struct {
	at   time.Time
	what string
}

func newLockFront(t *testing.T, hold time.Duration) (*lockFront, string) {
	t.Helper()
	sb, err := marketplace.New(marketplace.Config{})
	require.NoError(t, err)
	sb.SetIgnoreIdempotencyKey(true)
	f := &lockFront{sb: sb, hold: hold, creating: make(chan time.Time, 8)}
	srv, err := sandbox.Start("", f)
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	return f, srv.URL
}

func (f *lockFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.log = append(f.log, frontRequest{at: time.Now(), what: r.Method + " " + r.URL.Path})
	creates := 0
	for _, q := range f.log {
		if q.what == "POST /v1/products" {
			creates++
		}
	}
	f.mu.Unlock()
	if r.Method == http.MethodPost && r.URL.Path == "/v1/products" && creates == 1 {
		f.creating <- time.Now()
		time.Sleep(f.hold)
		f.sb.ServeHTTP(w, r.WithContext(context.WithoutCancel(r.Context())))
		return
	}
	f.sb.ServeHTTP(w, r)
}

// requests returns the requests that arrived in [from, to), and how many creates in all.
func (f *lockFront) requests(from, to time.Time) (between []string, creates int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.log {
		if !q.at.Before(from) && q.at.Before(to) {
			between = append(between, q.what)
		}
		if q.what == "POST /v1/products" {
			creates++
		}
	}
	return between, creates
}

// TestEdgesLostLockStopsTheWork: the worker holding a publication's job cannot renew its lock
// (its Redis, one of the test's own, is paused past the lock) while its create is in flight at
// a gateway that ignores Idempotency-Key. When the lock may run out, the worker cancels the
// handler: it makes no further call for the job and does not record its outcome, which the
// gateway applies anyway. Once Redis is back, the job is taken again after the stalled check;
// that delivery's lookup finds the product: one create, one product, the operation succeeds,
// recorded only after Redis came back.
//
// The schedule: the test holds the publication's row lock (the worker's first transaction
// waits on it) for the first 0.6 of the lock after pausing Redis, so that the create starts
// late in the lock and is still in flight when the lock is lost (between 0.9 and 1.0 of it:
// renewals are tried every tenth), and answers at about 1.08.
func TestEdgesLostLockStopsTheWork(t *testing.T) {
	t.Parallel()
	const lock = 12 * time.Second
	front, url := newLockFront(t, lock/2-200*time.Millisecond)
	rds := redistest.StartPrivate(t)
	w := newLivenessWorld(t, url, 0, map[string]string{
		"JOB_LOCK_DURATION": lock.String(),
		"PLATFORM_TIMEOUT":  (lock / 2).String(),
		"AI_TIMEOUT":        (lock / 2).String(),
		"FETCH_TIMEOUT":     (lock / 2).String(),
		"RECONCILE_AFTER":   "5m", // not what this test is about
	}, rds.URL)
	pubID, opID, _ := w.publish(t)
	ctx := context.Background()
	held, err := w.db.Owner.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = held.Rollback(ctx) })
	_, err = held.Exec(ctx, "SELECT 1 FROM publications WHERE id = $1 FOR UPDATE", pubID)
	require.NoError(t, err)
	w1 := w.startWork(t)
	// Released before the worker is stopped (cleanups run last-registered first), so that a
	// failure below does not leave it stopping against a held row or a paused Redis.
	t.Cleanup(func() { _ = held.Rollback(ctx) })
	seedEventually(t, 30*time.Second, func() bool {
		return w.env.Count(`SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock'`) > 0
	}, "the worker did not take the job")
	rds.Pause(t)
	t.Cleanup(func() { rds.Resume(t) })
	paused := time.Now()
	time.Sleep(time.Until(paused.Add(lock * 6 / 10)))
	require.NoError(t, held.Rollback(ctx))

	var createAt time.Time
	select {
	case createAt = <-front.creating:
	case <-time.After(lock / 4):
		require.FailNow(t, "the worker did not create the product")
	}
	seedEventually(t, time.Until(paused.Add(lock*11/10)), func() bool {
		return strings.Contains(w1.out.String(), "lost the lock of a running job")
	}, "the worker did not notice its lock was lost")
	lostAt := time.Now()
	require.Less(t, lostAt.Sub(createAt), front.hold, "the schedule: the create is still in flight when the lock is lost")

	time.Sleep(time.Until(paused.Add(lock * 13 / 10))) // the held create is applied meanwhile
	between, _ := front.requests(createAt.Add(time.Millisecond), time.Now())
	require.Empty(t, between, "no call after the create while the lock was lost")
	resumed := time.Now()
	rds.Resume(t)
	w.startWork(t)

	status, code := w.waitFinished(t, opID, resumed, lock+livenessJobBudget)
	require.Equal(t, "succeeded", status, code)
	_, creates := front.requests(time.Time{}, time.Now())
	require.Equal(t, 1, creates, "one create: no second call")
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Equal(t, 1, w.env.Count("SELECT count(*) FROM operations WHERE id = $1 AND updated_at >= $2", opID, resumed),
		"recorded after Redis came back, not by the worker that lost the lock")
}
