package tests

// The edges of a job's life, with real processes: a worker stopped (SIGTERM) while its call
// is in flight, a worker whose lock renewals fail, a record step that fails after the call,
// a task that fails for good while the platform holds its product.

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/infra/sandbox"
	"github.com/listingkit/listing/infra/sandbox/marketplace"
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
	w1 := w.startWork(t)
	pubID, opID, _ := w.publish(t)
	front.waitHeld(t)
	w1.kill(t)
	require.NoError(t, w.rdb.FlushDB(context.Background()).Err())
	since := time.Now()
	w.startWork(t)

	status, code := w.waitFinished(t, opID, since, livenessBound)
	require.Equal(t, "succeeded", status, code)
	require.Equal(t, 1, front.sb.ProductsWithRef(pubID), "platform products of the publication")
	require.Equal(t, 1, w.env.Count(`SELECT count(*) FROM outbox_all_events WHERE event_type = 'publication.requested'
		AND event_payload->>'publication_id' = $1 AND event_payload->'last_look'->>'code' = 'DELIVERY_EXHAUSTED'`, pubID),
		"one last look, holding DELIVERY_EXHAUSTED")
}
