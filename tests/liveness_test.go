package tests

// Liveness: every accepted operation reaches a terminal state, however its BullMQ job ends.
// Each test runs the real `app dispatch` and `app work` as child processes, kills them or
// takes the job away from Redis, and waits for the operation to finish within the bound the
// README states for the settings of livenessEnv.

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/config"
	"github.com/listingkit/listing/infra/postgres/pgtest"
	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
	"github.com/listingkit/listing/internal/servicetest"
)

// Settings of the liveness children: a dead worker's job is taken back within about
// JOB_LOCK_DURATION + JOB_STALLED_INTERVAL; a task unmoved for RECONCILE_AFTER is delivered
// again at the next sweep (RECONCILE_INTERVAL). RECONCILE_AFTER is the least config allows
// for JOB_ATTEMPTS=3 (2 s of backoff) and the 2 s lock, plus one second.
const (
	livenessLock      = 2 * time.Second
	livenessAfter     = 5 * time.Second
	livenessInterval  = 500 * time.Millisecond
	livenessJobBudget = 15 * time.Second // a publication job against the sandbox, with retries
)

// livenessBound is how long an operation whose job was lost may take to finish: one
// reconciliation (RECONCILE_AFTER + RECONCILE_INTERVAL) and the job that follows.
const livenessBound = livenessAfter + livenessInterval + livenessJobBudget

func livenessEnv(extra map[string]string) map[string]string {
	env := map[string]string{
		"JOB_LOCK_DURATION": livenessLock.String(),
		// Short call time-outs: the call fences (two time-outs) stay short.
		"PLATFORM_TIMEOUT":     (livenessLock / 2).String(),
		"AI_TIMEOUT":           (livenessLock / 2).String(),
		"FETCH_TIMEOUT":        (livenessLock / 2).String(),
		"JOB_STALLED_INTERVAL": "500ms",
		"RECONCILE_AFTER":      livenessAfter.String(),
		"RECONCILE_INTERVAL":   livenessInterval.String(),
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// heldFront serves a marketplace sandbox; the first `hold` calls to /v1/products from the
// first creation on (the creation, then the lookup by external_ref that a redelivered job
// makes first) are performed and never answered, as if their worker died before it read
// the answer. Each held request is announced on held.
type heldFront struct {
	sb      *marketplace.Sandbox
	hold    int32
	created atomic.Bool
	// holdVerify, while set, holds every store verification without performing it.
	holdVerify atomic.Bool
	seen       atomic.Int32
	held       chan struct{}
	close      chan struct{}
	// products records when each request to /v1/products arrived.
	mu       sync.Mutex
	products []time.Time
}

// productsSince returns when the requests to /v1/products that arrived after since did.
func (f *heldFront) productsSince(since time.Time) []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []time.Time
	for _, at := range f.products {
		if at.After(since) {
			out = append(out, at)
		}
	}
	return out
}

func newHeldFront(t *testing.T, hold int, ignoreKey bool) (*heldFront, string) {
	t.Helper()
	sb, err := marketplace.New(marketplace.Config{})
	require.NoError(t, err)
	sb.SetIgnoreIdempotencyKey(ignoreKey)
	f := &heldFront{sb: sb, hold: int32(hold), held: make(chan struct{}, hold+1), close: make(chan struct{})}
	srv, err := sandbox.Start("", f)
	require.NoError(t, err)
	t.Cleanup(func() { close(f.close); _ = srv.Close() })
	return f, srv.URL
}

func (f *heldFront) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f.holdVerify.Load() && r.URL.Path == "/v1/stores/verify" {
		f.held <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-f.close:
		}
		return
	}
	if r.URL.Path == "/v1/products" {
		f.mu.Lock()
		f.products = append(f.products, time.Now())
		f.mu.Unlock()
	}
	if r.Method == http.MethodPost && r.URL.Path == "/v1/products" {
		f.created.Store(true)
	}
	if r.URL.Path != "/v1/products" || !f.created.Load() || f.seen.Add(1) > f.hold {
		f.sb.ServeHTTP(w, r)
		return
	}
	f.sb.ServeHTTP(discard{}, r)
	f.held <- struct{}{}
	select {
	case <-r.Context().Done():
	case <-f.close:
	}
}

// waitHeld waits until the next held request arrived.
func (f *heldFront) waitHeld(t *testing.T) {
	t.Helper()
	select {
	case <-f.held:
	case <-time.After(60 * time.Second):
		require.FailNow(t, "no worker reached the platform")
	}
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}

// livenessWorld is one test's service: the API in process, `app dispatch` as a child, an
// account with a verified store and a product, and the Redis database of the queues.
type livenessWorld struct {
	env       *servicetest.Env
	db        *pgtest.DB
	rdb       *redis.Client
	prefix    string
	redisURL  string
	workEnv   map[string]string
	acct      servicetest.Account
	storeID   string
	productID string
}

// newLivenessWorld starts the world; the store is verified by a first worker, which is
// stopped before it returns. redisDB > 0 gives the test a Redis database of its own (it may
// flush it); own, when given, is the URL of a Redis of the test's own (redisDB is ignored).
func newLivenessWorld(t *testing.T, front string, redisDB int, extra map[string]string, own ...string) *livenessWorld {
	t.Helper()
	w := &livenessWorld{prefix: seedPrefix(), redisURL: seedRedisURL()}
	if len(own) > 0 {
		w.redisURL = own[0]
		opts, err := redis.ParseURL(w.redisURL)
		require.NoError(t, err)
		w.rdb = redis.NewClient(opts)
		t.Cleanup(func() { _ = w.rdb.Close() })
	} else if redisDB > 0 {
		opts, err := redis.ParseURL(w.redisURL)
		require.NoError(t, err)
		opts.DB = redisDB
		w.redisURL = "redis://" + opts.Addr + "/" + strconv.Itoa(redisDB)
		w.rdb = redis.NewClient(opts)
		t.Cleanup(func() { w.rdb.FlushDB(context.Background()); _ = w.rdb.Close() })
	} else {
		w.rdb = seedRedis(t, w.prefix)
	}
	w.env = servicetest.Start(t, func(c *config.Config) { c.BullMQPrefix, c.RedisURL = w.prefix, w.redisURL })
	w.db = w.env.DB
	w.workEnv = livenessEnv(map[string]string{"PLATFORM_BASE_URL": front, "REDIS_URL": w.redisURL})
	for k, v := range extra {
		w.workEnv[k] = v
	}
	seedStartProc(t, "dispatch", seedEnv(w.db.AppURL, w.prefix, w.workEnv), "dispatch").waitLog(t, "outbox dispatcher started")
	w.acct = w.env.Register("liveness@example.com")
	verifier := w.startWork(t)
	w.storeID = seedVerifiedStore(t, w.env, w.acct, "liveness")
	verifier.stop()
	w.productID = seedProduct(t, w.env, w.acct)
	return w
}

func (w *livenessWorld) startWork(t *testing.T) *seedProc {
	t.Helper()
	p, _ := seedStartWork(t, w.db.AppURL, w.prefix, w.workEnv)
	return p
}

// publish requests the product's first publication; it returns the publication and
// operation ids and the id of the job the outbox delivers.
func (w *livenessWorld) publish(t *testing.T) (pubID, opID, jobID string) {
	t.Helper()
	pub := w.env.Do(servicetest.Request{Method: "POST", Path: seedWS(w.acct) + "/products/" + w.productID + "/publications",
		Token: w.acct.AccessToken, Header: seedKey(), Body: map[string]any{"store_id": w.storeID}})
	require.Equal(t, http.StatusAccepted, pub.Status, "%s", pub.Body)
	pubID, opID = seedField(t, pub, "publication", "id"), seedField(t, pub, "operation", "id")
	jobID = seedOutbox(t, w.db, w.acct.WorkspaceID, "listing-publish").ID
	seedWaitStatus(t, w.db, "dispatched", "SELECT status FROM outbox_all_events WHERE id = $1", jobID)
	return pubID, opID, jobID
}

// loseJobAfterCreate loses a publication's job after the platform created its product: a
// worker takes the job, the front holds the create's answer, the worker is SIGKILLed, the
// queues' Redis database is flushed (a restart without persistence: the world needs a Redis
// database of its own), and another worker starts. It returns the publication, operation
// and job ids, and when the other worker started.
func (w *livenessWorld) loseJobAfterCreate(t *testing.T, front *heldFront) (pubID, opID, jobID string, since time.Time) {
	t.Helper()
	w1 := w.startWork(t)
	pubID, opID, jobID = w.publish(t)
	front.waitHeld(t)
	w1.kill(t)
	require.NoError(t, w.rdb.FlushDB(context.Background()).Err())
	since = time.Now()
	w.startWork(t)
	return pubID, opID, jobID, since
}

// waitFinished waits until the operation is terminal, at most bound after since, and
// returns its status and error code.
func (w *livenessWorld) waitFinished(t *testing.T, opID string, since time.Time, bound time.Duration) (status, code string) {
	t.Helper()
	seedEventually(t, time.Until(since.Add(bound)), func() bool {
		require.NoError(t, w.db.Owner.QueryRow(context.Background(),
			"SELECT status, error_code FROM operations WHERE id = $1", opID).Scan(&status, &code))
		return status == "succeeded" || status == "failed"
	}, "operation %s not finished within %s (last %s)", opID, bound, &status)
	return status, code
}

// TestLivenessWorkerKilledTwice: the worker holding a publication's job is SIGKILLed twice in
// a row, while it waits for the platform: first after the platform created the product,
// then during the next worker's lookup of it. With the default JOB_MAX_STALLS a stall is retried, so a third worker finishes the
// publication; with JOB_MAX_STALLS=1 (BullMQ's default) the second stall fails the job
// without running any handler, and that failure still reaches the task (JOB_STALLED, after a
// last look that finds the product, so the publication succeeds). Either
// way the operation ends, and the platform holds one product.
func TestLivenessWorkerKilledTwice(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, maxStalls, status, code string
	}{
		{name: "stalls_retried", status: "succeeded"},
		// The stall limit decides JOB_STALLED; the last look before it finds the product the
		// first worker created, so the publication succeeds.
		{name: "stall_limit_takes_a_last_look", maxStalls: "1", status: "succeeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			front, url := newHeldFront(t, 2, false)
			// Not what this test is about: the reconciler stays out of the way.
			extra := map[string]string{"RECONCILE_AFTER": "5m"}
			if c.maxStalls != "" {
				extra["JOB_MAX_STALLS"] = c.maxStalls
			}
			w := newLivenessWorld(t, url, 0, extra)
			w1 := w.startWork(t)
			pubID, opID, _ := w.publish(t)
			front.waitHeld(t)
			w1.kill(t)
			w2 := w.startWork(t)
			front.waitHeld(t)
			w2.kill(t)
			since := time.Now()
			w.startWork(t)

			// Taken back after the dead worker's lock and a stalled check, then one job.
			status, code := w.waitFinished(t, opID, since, livenessLock+time.Second+livenessJobBudget)
			require.Equal(t, c.status, status)
			require.Equal(t, c.code, code)
			require.Equal(t, c.status, seedOne(t, w.db, "SELECT status FROM publications WHERE id = $1", pubID))
			require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
		})
	}
}

// TestLivenessSIGKILLDuringACreateResumesFast: at the default lock, stalled check and call
// time-outs (a 15s platform time-out), the worker holding a publication's job is SIGKILLed
// while the platform, which ignores Idempotency-Key, created the product and delays its
// answer. Another worker process takes the job back and runs it again within 45s of the
// kill (JOB_LOCK_DURATION + JOB_STALLED_INTERVAL), not before the dead worker's call
// deadline (the call fence, on the task), and the platform holds one product.
func TestLivenessSIGKILLDuringACreateResumesFast(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 1, true)
	// The reconciler stays out of the way: the job comes back through BullMQ alone.
	w := newLivenessWorld(t, url, 0, map[string]string{"RECONCILE_AFTER": "5m"})
	for _, k := range []string{"JOB_LOCK_DURATION", "JOB_STALLED_INTERVAL", "PLATFORM_TIMEOUT", "AI_TIMEOUT", "FETCH_TIMEOUT"} {
		delete(w.workEnv, k) // the defaults
	}
	w1 := w.startWork(t)
	pubID, opID, _ := w.publish(t)
	front.waitHeld(t) // the create was performed; its answer never comes
	w1.kill(t)
	killed := time.Now()
	var deadline time.Time
	require.NoError(t, w.db.Owner.QueryRow(context.Background(),
		"SELECT call_deadline FROM publications WHERE id = $1", pubID).Scan(&deadline))
	require.WithinDuration(t, killed.Add(30*time.Second), deadline, 5*time.Second,
		"the dead worker's call is fenced by two platform time-outs from its start")
	w.startWork(t)

	status, code := w.waitFinished(t, opID, killed, 45*time.Second+livenessJobBudget)
	require.Equal(t, "succeeded", status, code)
	again := front.productsSince(killed)
	require.NotEmpty(t, again, "the job ran again")
	t.Logf("the job ran again %s after the kill (call deadline %s after it)", again[0].Sub(killed).Round(time.Millisecond),
		deadline.Sub(killed).Round(time.Millisecond))
	require.LessOrEqual(t, again[0].Sub(killed), 45*time.Second, "the job runs again within 45s of the kill")
	require.False(t, again[0].Before(deadline), "no call before the dead worker's call deadline")
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Equal(t, "2", seedOne(t, w.db, "SELECT attempts::text FROM publications WHERE id = $1", pubID),
		"the wait for the fence spends no attempt")
}

// TestLivenessRedisFlushedAfterDispatch: the worker dies after the platform created the
// product, then the queues' Redis database is flushed (a restart without persistence): the
// job is gone, the outbox row says dispatched, the publication is running. The reconciler
// delivers it again under a new job id; against a gateway that ignores Idempotency-Key, the
// worker's lookup by external_ref finds the product, so the platform still holds one.
func TestLivenessRedisFlushedAfterDispatch(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 1, true)
	w := newLivenessWorld(t, url, 7, nil)
	pubID, opID, jobID, since := w.loseJobAfterCreate(t, front)

	status, code := w.waitFinished(t, opID, since, livenessBound)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Equal(t, "1", seedOne(t, w.db, "SELECT reconciliations::text FROM publications WHERE id = $1", pubID))
	require.Equal(t, 2, w.env.Count(`SELECT count(*) FROM outbox_all_events WHERE event_type = 'publication.requested'
		AND event_payload->>'publication_id' = $1`, pubID), "the request and one redelivery")
	h, _ := seedJobCount(t, w.rdb, w.prefix, "listing-publish", jobID)
	require.Zero(t, h, "the first job stays lost: the redelivery has a job id of its own")
}

// TestLivenessJobRemovedByHand: an operator removes a waiting publication job from Redis
// (no worker ran it). The reconciler delivers the publication again and it succeeds.
func TestLivenessJobRemovedByHand(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 0, false)
	w := newLivenessWorld(t, url, 0, nil)
	pubID, opID, jobID := w.publish(t)
	ctx := context.Background()
	k := w.prefix + ":listing-publish:"
	require.NoError(t, w.rdb.Del(ctx, k+jobID).Err())
	require.NoError(t, w.rdb.LRem(ctx, k+"wait", 0, jobID).Err())
	h, places := seedJobCount(t, w.rdb, w.prefix, "listing-publish", jobID)
	require.Zero(t, h+places)
	since := time.Now()
	w.startWork(t)

	status, code := w.waitFinished(t, opID, since, livenessBound)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID))
}

// TestLivenessJobLostFiveTimesBeforeAnyWorker: a publication waits in a backlog (no worker
// runs) while its job is lost five times in a row (removed from Redis, as a restart without
// persistence would). Each loss costs no try: the reconciler delivers it again every time,
// backing off, and once a worker starts the publication succeeds, with one run and one
// product.
func TestLivenessJobLostFiveTimesBeforeAnyWorker(t *testing.T) {
	t.Parallel()
	front, url := newHeldFront(t, 0, false)
	w := newLivenessWorld(t, url, 0, nil)
	pubID, opID, jobID := w.publish(t)
	ctx := context.Background()
	k := w.prefix + ":listing-publish:"
	const losses = 5
	for n := 1; n <= losses; n++ {
		require.NoError(t, w.rdb.Del(ctx, k+jobID).Err())
		require.NoError(t, w.rdb.LRem(ctx, k+"wait", 0, jobID).Err())
		h, places := seedJobCount(t, w.rdb, w.prefix, "listing-publish", jobID)
		require.Zero(t, h+places)
		// The reconciler delivers it again under a new job id (after RECONCILE_AFTER and a
		// backoff of RECONCILE_INTERVAL × (2^(n−1) − 1)).
		seedEventually(t, 90*time.Second, func() bool {
			return w.env.Count(`SELECT count(*) FROM outbox_all_events WHERE event_type = 'publication.requested'
				AND event_payload->>'publication_id' = $1 AND status = 'dispatched'`, pubID) == n+1
		}, "loss %d: not delivered again", n)
		jobID = seedOne(t, w.db, `SELECT id::text FROM outbox_all_events WHERE event_type = 'publication.requested'
			AND event_payload->>'publication_id' = $1 ORDER BY created_at DESC LIMIT 1`, pubID)
		require.Equal(t, "pending", seedOne(t, w.db, "SELECT status FROM operations WHERE id = $1", opID))
	}
	since := time.Now()
	w.startWork(t)

	status, code := w.waitFinished(t, opID, since, livenessJobBudget)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID))
	require.Equal(t, "1 0 5", seedOne(t, w.db,
		"SELECT attempts || ' ' || reconciliations || ' ' || redeliveries FROM publications WHERE id = $1", pubID))
}
