package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/listingkit/listing/app/worker"
	"github.com/listingkit/listing/infra/jobs"
	"github.com/listingkit/listing/infra/outbox"
)

// MemoryQueues do not run watermill's universal Pub/Sub suite: their Publish returns only
// after the subscriber acknowledged (that is what lets the outbox mark an event dispatched
// after its handler ran), and the suite publishes a batch before it reads any of it, which
// then waits for ever (tried: most of its tests hang). The behaviour the transport relies on
// is tested here and end to end in tests/memory_transport_test.go.

// A job queue's publish succeeds only once the Memory transport settled every message: with
// no consumer, or one that did not settle, the outbox is told to deliver again.
func TestMemoryQueuesJobQueuesNeedASettledConsumer(t *testing.T) {
	q := jobs.NewMemoryQueues([]string{"q"})
	t.Cleanup(func() { _ = q.Close() })
	require.Error(t, q.Publish("q", message.NewMessage(uuid.NewString(), nil)), "no consumer")

	var requeued []outbox.JobDelivery
	mem := jobs.NewMemory(q, jobs.MemoryConfig{Attempts: 3, Backoff: func(int) time.Duration { return time.Second },
		Requeue: func(_ context.Context, _ worker.Job, _ string, _ time.Duration, next outbox.JobDelivery) error {
			requeued = append(requeued, next)
			return nil
		}})
	msgs, err := mem.Subscriber().Subscribe(context.Background(), "q")
	require.NoError(t, err)
	go func() {
		for m := range msgs {
			d, _ := mem.Delivery(m)
			mem.Settle(context.Background(), m, worker.Job{ID: m.UUID, Attempt: d.Attempt}, errors.New("retry me"))
		}
	}()
	require.NoError(t, q.Publish("q", message.NewMessage(uuid.NewString(), nil)))
	require.Equal(t, []outbox.JobDelivery{{Attempt: 2}}, requeued, "a retry goes back to the outbox as attempt 2")
}

// settleOnce settles one message of a fresh memory transport (lease 2m, backoff n seconds
// after attempt n) for job and err under ctx, and returns what it handed back to the outbox
// (nil: nothing) and whether the message counts as handled by the dispatcher's publish.
func settleOnce(t *testing.T, ctx context.Context, job worker.Job, err error) (*requeueCall, bool) {
	t.Helper()
	q := jobs.NewMemoryQueues([]string{"q"})
	t.Cleanup(func() { _ = q.Close() })
	var got *requeueCall
	mem := jobs.NewMemory(q, jobs.MemoryConfig{Attempts: 3, Lease: 2 * time.Minute,
		Backoff: func(n int) time.Duration { return time.Duration(n) * time.Second },
		Requeue: func(_ context.Context, _ worker.Job, claim string, after time.Duration, next outbox.JobDelivery) error {
			got = &requeueCall{Claim: claim, After: after, Next: next}
			return nil
		}})
	msgs, serr := mem.Subscriber().Subscribe(context.Background(), "q")
	require.NoError(t, serr)
	go func() {
		for m := range msgs {
			mem.Settle(ctx, m, job, err)
		}
	}()
	msg := message.NewMessage(uuid.NewString(), nil)
	msg.Metadata.Set(outbox.MetadataClaim, "claim/1")
	handled := q.Publish("q", msg) == nil
	return got, handled
}

type requeueCall struct {
	Claim string
	After time.Duration
	Next  outbox.JobDelivery
}

// Every run of a handler is an attempt: an upstream time-out (context.DeadlineExceeded, as
// an HTTP client reports it) goes back to the outbox as the next attempt after its backoff,
// not as the same attempt at once (which retried a slow upstream without end, billing each
// time). Only a job cut short by the shutdown keeps its attempt, and waits out its lease.
func TestMemorySettleCountsEveryAttempt(t *testing.T) {
	job := worker.Job{ID: "j", Attempt: 2}
	timeout := fmt.Errorf("ai: generate: %w", context.DeadlineExceeded)
	got, handled := settleOnce(t, context.Background(), job, timeout)
	require.True(t, handled)
	require.Equal(t, &requeueCall{Claim: "claim/1", After: 2 * time.Second, Next: outbox.JobDelivery{Attempt: 3}}, got,
		"an upstream time-out on attempt 2: attempt 3, after attempt 2's backoff, under the claim that published it")

	got, _ = settleOnce(t, context.Background(), job, fmt.Errorf("call: %w", context.Canceled))
	require.Equal(t, 3, got.Next.Attempt, "a cancellation outside the shutdown is an attempt too")

	// A last attempt whose handler recorded a failure returns it Permanent: final. One that
	// returns a plain error recorded nothing (its context ended): handed back once, after the
	// lease (a call it left in flight may still land), as one more attempt; not twice.
	last := worker.Job{ID: "j", Attempt: 3, LastAttempt: true}
	got, handled = settleOnce(t, context.Background(), last, worker.Permanent(timeout))
	require.True(t, handled)
	require.Nil(t, got, "a failure recorded on the last attempt is final")
	got, handled = settleOnce(t, context.Background(), last, timeout)
	require.True(t, handled)
	require.Equal(t, &requeueCall{Claim: "claim/1", After: 2 * time.Minute, Next: outbox.JobDelivery{Attempt: 4}}, got,
		"a last attempt cut short by its time-out is handed back once, not dropped for the reconciler")
	again := worker.Job{ID: "j", Attempt: 4, LastAttempt: true}
	got, handled = settleOnce(t, context.Background(), again, timeout)
	require.True(t, handled)
	require.Nil(t, got, "handed back once already: left to the reconciler")

	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	got, _ = settleOnce(t, stopped, job, fmt.Errorf("call: %w", context.Canceled))
	require.Equal(t, &requeueCall{Claim: "claim/1", After: 2 * time.Minute, Next: outbox.JobDelivery{Attempt: 2}}, got,
		"cut short by the shutdown: same attempt, not before the lease would have ended")

	got, handled = settleOnce(t, context.Background(), job, fmt.Errorf("%w: %w", jobs.ErrNotTaken, outbox.ErrClaimLost))
	require.True(t, handled, "a lost claim is another claim's to deliver")
	require.Nil(t, got)
	got, handled = settleOnce(t, context.Background(), job, fmt.Errorf("%w: %w", jobs.ErrNotTaken, errors.New("db down")))
	require.False(t, handled, "not taken for another reason: the dispatcher's publish fails, the outbox delivers it again")
	require.Nil(t, got)
}

// The Runner takes a memory transport's job before its handler runs: a job whose outbox
// claim was lost while it waited (another claim delivers the event) is not run and counts as
// handled; a job taken runs with the lease its take asked for, under the claim it came with.
func TestMemoryRunsOnlyTakenJobs(t *testing.T) {
	q := jobs.NewMemoryQueues([]string{"q"})
	t.Cleanup(func() { _ = q.Close() })
	var mu sync.Mutex
	var takes []string
	lost := map[string]bool{}
	mem := jobs.NewMemory(q, jobs.MemoryConfig{Attempts: 3, Lease: time.Minute, Backoff: func(int) time.Duration { return time.Second },
		Take: func(_ context.Context, job worker.Job, claim string, lease time.Duration) error {
			mu.Lock()
			defer mu.Unlock()
			takes = append(takes, fmt.Sprintf("%s %s %s", job.ID, claim, lease))
			if lost[job.ID] {
				return fmt.Errorf("take: %w", outbox.ErrClaimLost)
			}
			return nil
		},
		Requeue: func(context.Context, worker.Job, string, time.Duration, outbox.JobDelivery) error { return nil }})
	// The handler reports what it ran and the time it was given; the test asserts (a failed
	// assertion on the Runner's goroutine would leave the test waiting).
	type run struct {
		id       string
		deadline time.Duration
	}
	ran := make(chan run, 2)
	r, err := jobs.NewRunner(jobs.Config{Transport: mem, Concurrency: 1, JobTimeout: jobs.HandlerTimeout(time.Minute),
		Handlers: map[string]worker.Handler{"q": worker.HandlerFunc(func(ctx context.Context, job worker.Job) error {
			dl, _ := ctx.Deadline()
			ran <- run{job.ID, time.Until(dl)}
			return nil
		})}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	publish := func(id string) error {
		body, err := json.Marshal(worker.Envelope{EventID: id, WorkspaceID: uuid.NewString(), EventType: "x", Payload: json.RawMessage(`{}`)})
		require.NoError(t, err)
		msg := message.NewMessage(id, body)
		msg.Metadata.Set(outbox.MetadataClaim, "round/"+id)
		return q.Publish("q", msg)
	}
	mu.Lock()
	lost["stale"] = true
	mu.Unlock()
	var perr error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if perr = publish("stale"); perr == nil { // until the Runner subscribed
			break
		}
	}
	require.NoError(t, perr, "a job whose claim was lost counts as handled")
	require.NoError(t, publish("fresh"))
	select {
	case got := <-ran:
		require.Equal(t, "fresh", got.id)
		require.InDelta(t, 48*time.Second, got.deadline, float64(5*time.Second), "4/5 of the lease")
	case <-time.After(10 * time.Second):
		require.FailNow(t, "the fresh job did not run within 10 s")
	}
	require.Empty(t, ran, "the stale job did not run")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"stale round/stale 1m0s", "fresh round/fresh 1m0s"}, takes[len(takes)-2:])
}
